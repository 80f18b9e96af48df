"""Text processing: product reviews as a JSON list of records (files/reviews.json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "reviews_text.ipynb"
FAMILY = "text processing"
TITLE = "words, phrases and sentiment in product reviews"
ALIASES = {"reviews": ("reviews", "df", "rv"), "records": ("records", "items", "raw")}


def plan(dev: Developer) -> None:
    dev.imports(
        "import json",
        "import re",
        "import pandas as pd",
        "import numpy as np",
        then="with open('files/reviews.json') as f:\n    records = json.load(f)\nlen(records)",
    )
    dev.cell("records[0]", peek=["records[-1]['text']"])
    dev.cell(
        "reviews = pd.DataFrame(records)",
        show="reviews.head()",
        check=["reviews.shape", "print(f'{reviews.shape[0]} rows, {reviews.shape[1]} columns')"],
    )
    dev.cell("reviews['rating'].value_counts().sort_index()")
    dev.cell(
        "reviews['length'] = reviews['text'].str.len()",
        show="reviews.groupby('rating')['length'].mean().round(1)",
        wrong=[("reviews['text'].str.len()", "reviews['text'].len()")],
    )
    dev.cell(
        r"reviews['text_clean'] = reviews['text'].str.lower().str.replace(r'[^a-z\s]', ' ', regex=True).str.split().str.join(' ')",
        show="reviews['text_clean'].head()",
    )
    dev.cell("reviews['words'] = reviews['text_clean'].str.split()", show="reviews['words'].str.len().describe()")
    dev.cell(
        "from collections import Counter\ncounts = Counter(w for words in reviews['words'] for w in words)",
        show="counts.most_common(10)",
        tweaks=[("most_common(10)", "most_common(20)")],
    )
    dev.cell(
        "stop = {'the', 'to', 'of', 'it', 'for', 'my', 'i', 'one', 'own', 'does', 'not', 'as', 'and', 'a'}\n"
        "content = Counter(w for words in reviews['words'] for w in words if w not in stop)",
        show="content.most_common(10)",
        check=["len(content)"],
    )
    dev.cell(
        "bigrams = Counter(tuple(ws[i:i + 2]) for ws in reviews['words'] for i in range(len(ws) - 1))",
        show="bigrams.most_common(8)",
        check=["len(bigrams)"],
    )
    dev.cell("reviews['shouting'] = reviews['text'].str.isupper()", show="reviews['shouting'].sum()")
    dev.cell("reviews.loc[reviews['shouting'], ['rating', 'text']].head()", optional=0.3)
    dev.section("## A tiny sentiment lexicon")
    dev.cell(
        "positive = {'great', 'quiet', 'easy', 'fast', 'solid', 'love', 'good', 'quickly'}\n"
        "negative = {'stopped', 'loud', 'hard', 'broken', 'cheap', 'burning', 'overpriced'}\n\n"
        "def score(words):\n    return sum(w in positive for w in words) - sum(w in negative for w in words)\n\n"
        "score(['works', 'great', 'too', 'loud']), score(['love', 'the', 'design'])",
        wrong=[("sum(w in negative for w in words)", "sum(negative in words)")],
    )
    dev.cell(
        "reviews['sentiment'] = reviews['words'].apply(score)",
        show="reviews.groupby('rating')['sentiment'].mean().round(2)",
    )
    dev.cell("pd.crosstab(reviews['rating'], np.sign(reviews['sentiment']))")
    dev.cell(
        "reviews['exclaims'] = reviews['text'].str.count('!')",
        show="reviews.groupby('rating')['exclaims'].mean().round(2)",
    )
    dev.cell(
        "reviews['date'] = pd.to_datetime(reviews['date'])",
        show="reviews.set_index('date').resample('MS')['rating'].mean().round(2)",
    )
    dev.cell(
        r"mentions = reviews['text'].str.extractall(r'(?i)\b(lid|plastic|design|delivery|build)\b')[0].str.lower()",
        show="mentions.value_counts()",
        check=["len(mentions)"],
    )
    dev.cell("reviews.groupby('product')['rating'].agg(['mean', 'count']).round(2).sort_values('mean')")
    dev.cell("reviews[reviews['product'] == 'air fryer']['text'].sample(3, random_state=4).tolist()")
    dev.cell(
        "from sklearn.feature_extraction.text import TfidfVectorizer\n"
        "vec = TfidfVectorizer(min_df=3, stop_words='english')\nmatrix = vec.fit_transform(reviews['text_clean'])",
        show="matrix.shape",
    )
    dev.cell(
        "terms = pd.Series(matrix.mean(axis=0).A1, index=vec.get_feature_names_out())",
        show="terms.nlargest(8).round(4)",
        wrong=[("vec.get_feature_names_out()", "vec.get_feature_names()")],
        check=["len(terms)"],
    )
    dev.cell("reviews['helpful_votes'].describe()", optional=0.3)
    dev.cell("reviews.sort_values('helpful_votes', ascending=False).head(3)[['product', 'rating', 'title']]")
    dev.cell(
        "import time\n\n"
        "def translate(text):\n    time.sleep(0.3)  # the translation service is rate limited\n    return text\n\n"
        "translated = [translate(t) for t in reviews['text'].head(10)]\nlen(translated)",
        long=("reviews['text'].head(10)", "reviews['text'].head(2)"),
    )
    dev.cell(
        "title_words = reviews['title'].str.split().str.len()",
        show="title_words.value_counts().sort_index()",
        check=["len(title_words)"],
    )
    dev.cell("reviews['verified'].mean().round(3), reviews.groupby('verified')['rating'].mean().round(2).to_dict()")
    dev.cell(
        "def normalise(text):\n    text = text.lower()\n"
        "    text = re.sub(r'[^a-z ]+', ' ', text)\n    return re.sub(r'\\s+', ' ', text).strip()\n\n"
        "normalise(records[5]['text'])"
    )
    dev.cell("(reviews['text_clean'] == reviews['text'].map(normalise)).mean()")
