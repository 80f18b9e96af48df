"""String processing on generated product reviews: str methods on a Series, regular expressions, tokenising, word counts.

The reviews are assembled in the notebook from fixed templates with a seeded
generator. The user extracts prices and ratings with regexes (a bad pattern
raises re.error, .str on a numeric column raises AttributeError), tokenises,
counts words, restarts and re-runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_05"
NOTEBOOK = "reviews_text.ipynb"
START = "2025-03-07T08:55:00+00:00"


def script(nb: Notebook) -> None:
    imports = nb.add("import re\nfrom collections import Counter\nimport numpy as np\nimport pandas as pd")
    nb.run(imports)
    make = nb.add(
        "rng = np.random.default_rng(7)\n"
        "products = ['Kettle', 'Toaster', 'Blender', 'Mixer', 'Grinder']\n"
        "opinions = ['Great value!', 'Broke after a week.', 'Works as expected', 'too LOUD', 'Would buy again :)',\n"
        "            'Terrible customer service', 'Fast shipping, nice box']\n"
        "rows = []\n"
        "for i in range(60):\n"
        "    p = products[rng.integers(len(products))]\n"
        "    price = rng.integers(15, 120) + rng.choice([0, 0.49, 0.99])\n"
        "    stars = int(rng.integers(1, 6))\n"
        "    text = f\"{p} ({stars}/5) - {opinions[rng.integers(len(opinions))]} Paid ${price:.2f}.\"\n"
        "    rows.append({'review_id': f'R{i:03d}', 'text': '  ' * int(rng.integers(0, 2)) + text})\n"
        "reviews = pd.DataFrame(rows)\n"
        "reviews.head()"
    )
    nb.run(make)
    lens = nb.add("reviews['text'].str.len().describe()")
    nb.run(lens)
    strip = nb.add("reviews['text'] = reviews['text'].str.strip()\nreviews['text'].str.len().min()")
    nb.run(strip)
    product = nb.add("reviews['product'] = reviews['text'].str.split(' ').str[0]\nreviews['product'].value_counts()")
    nb.run(product)
    stars = nb.add("reviews['stars'] = reviews['text'].str.extract(r'\\((\\d)/5\\)')\nreviews['stars'].mean()")
    nb.run(stars)
    nb.fix(stars, "reviews['text'].str.extract(r'\\((\\d)/5\\)')", "reviews['text'].str.extract(r'\\((\\d)/5\\)', expand=False).astype(int)")
    nb.run(stars)
    price = nb.add("reviews['price'] = reviews['text'].str.extract(r'Paid \\$(\\d+\\.\\d{2}')\nreviews['price'].head()")
    nb.run(price)
    nb.fix(price, "r'Paid \\$(\\d+\\.\\d{2}'", "r'Paid \\$(\\d+\\.\\d{2})', expand=False")
    nb.run(price)
    price_mean = nb.add("reviews.groupby('product')['price'].mean()")
    nb.run(price_mean)
    nb.fix(price, "expand=False)", "expand=False).astype(float)")
    nb.run(price)
    nb.run(price_mean)
    nb.fix(price_mean, "['price'].mean()", "['price'].agg(['mean', 'min', 'max']).round(2)")
    nb.run(price_mean)
    upper = nb.add("reviews['price'].str.upper()")
    nb.run(upper)
    nb.fix(upper, "reviews['price'].str.upper()", "reviews['text'].str.upper().head(3).tolist()")
    nb.run(upper)
    nb.save()
    loud = nb.add("reviews[reviews['text'].str.contains('loud')]")
    nb.run(loud)
    nb.fix(loud, "str.contains('loud')", "str.contains('loud', case=False)")
    nb.run(loud)
    tokenize = nb.add(
        "def tokenize(text):\n"
        "    return re.findall(r\"[a-z]+(?:'[a-z]+)?\", text.lower())\n"
        "tokenize(reviews.loc[0, 'text'])"
    )
    nb.run(tokenize)
    tokens = nb.add("reviews['tokens'] = reviews['text'].apply(tokenize)\nreviews['n_tokens'] = reviews['tokens'].str.len()\nreviews[['text', 'n_tokens']].head()")
    nb.run(tokens)
    counts = nb.add("word_counts = Counter(t for toks in reviews['tokens'] for t in toks)\nword_counts.most_common(10)")
    nb.run(counts)
    stop = nb.add(
        "stopwords = {'a', 'after', 'as', 'paid', 'again', 'would'}\n"
        "content = Counter({w: c for w, c in word_counts.items() if w not in stopwords})\n"
        "content.most_common(8)"
    )
    nb.run(stop)
    nb.fix(stop, "{'a', 'after', 'as', 'paid', 'again', 'would'}", "{'a', 'after', 'as', 'paid', 'again', 'would', 'week', 'box'}")
    nb.run(stop)
    sentiment = nb.add(
        "positive = {'great', 'nice', 'fast', 'works', 'buy'}\n"
        "negative = {'broke', 'terrible', 'loud'}\n"
        "def polarity(tokens):\n"
        "    return sum(t in positive for t in tokens) - sum(t in negative for t in tokens)\n"
        "reviews['polarity'] = reviews['tokens'].apply(polarity)\n"
        "reviews.groupby('polarity')['stars'].mean()"
    )
    nb.run(sentiment)
    crosstab = nb.add("pd.crosstab(reviews['product'], reviews['polarity'] > 0)")
    nb.run(crosstab)
    ids = nb.add("reviews['review_id'].str.replace('R', '').astype(int).max()")
    nb.run(ids)
    pad = nb.add("reviews['review_id'].str.zfill(6).head(3)")
    nb.run(pad)
    pad_bad = nb.add("reviews['n_tokens'].str.zfill(3)")
    nb.run(pad_bad)
    nb.fix(pad_bad, "reviews['n_tokens'].str.zfill(3)", "reviews['n_tokens'].astype(str).str.zfill(3).head(3)")
    nb.run(pad_bad)
    emoji = nb.add("reviews[reviews['text'].str.contains(':)', regex=True)].shape")
    nb.run(emoji)
    nb.fix(emoji, "regex=True", "regex=False")
    nb.run(emoji)
    template = nb.add(
        "summary = reviews.groupby('product').agg(n=('review_id', 'size'), stars=('stars', 'mean'))\n"
        "for product, row in summary.iterrows():\n"
        "    print(f'{product:<8} {row.n:>3} reviews, {row.stars:.1f} stars')"
    )
    nb.run(template)
    nb.fix(template, "{row.n:>3}", "{int(row.n):>3}")
    nb.run(template)
    nb.save()
    nb.restart()
    nb.run(counts)
    nb.run_all()
    bigrams = nb.add(
        "bigrams = Counter(zip(*(reviews['tokens'].explode().tolist()[i:] for i in range(2))))\n"
        "bigrams.most_common(5)"
    )
    nb.run(bigrams)
    nb.fix(
        bigrams,
        "Counter(zip(*(reviews['tokens'].explode().tolist()[i:] for i in range(2))))",
        "Counter(b for toks in reviews['tokens'] for b in zip(toks, toks[1:]))",
    )
    nb.run(bigrams)
    nb.save()
