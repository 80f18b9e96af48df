"""Modelling and evaluation: predict churn of telecom customers (files/churn.csv)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "churn_model.ipynb"
FAMILY = "modelling and evaluation"
TITLE = "train and evaluate a churn classifier"
ALIASES = {
    "churn": ("churn", "df", "customers"),
    "model": ("model", "clf", "logreg"),
    "final": ("final", "best_model", "tuned"),
}


def plan(dev: Developer) -> None:
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (4.5, 3), 'figure.dpi': 60})\n"
        "churn = pd.read_csv('files/churn.csv')\nchurn.shape",
    )
    dev.cell("churn.head()")
    dev.cell("churn['churned'].value_counts(normalize=True).round(3)")
    dev.cell("churn.groupby('contract')['churned'].mean().round(3)", peek=["churn['contract'].value_counts()"])
    dev.cell("churn.isna().sum()")
    dev.cell("churn['age'] = churn['age'].fillna(churn['age'].median())", show="churn['age'].describe().round(1)")
    dev.cell(
        "X = pd.get_dummies(churn.drop(columns=['customer_id', 'churned']), columns=['contract', 'payment'], drop_first=True, dtype=float)\n"
        "y = churn['churned']",
        show="X.shape",
        wrong=[("columns=['contract', 'payment']", "columns=['contract', 'payments']")],
        check=["len(X)", "print(f'{X.shape[1]} features for {len(X)} customers')"],
    )
    dev.cell("X.columns.tolist()")
    dev.cell(
        "from sklearn.model_selection import train_test_split\n"
        "X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=42, stratify=y)",
        show="X_train.shape, X_test.shape, y_train.mean().round(3)",
        check=["X_train.shape, X_test.shape", "len(X_train), len(X_test)"],
    )
    dev.section("## Logistic regression")
    dev.cell(
        "from sklearn.linear_model import LogisticRegression\nmodel = LogisticRegression(max_iter=1000)\nmodel.fit(X_train, y_train)",
        wrong=[("LogisticRegression(max_iter=1000)", "LogisticRegression(max_iters=1000)")],
    )
    dev.cell("round(model.score(X_train, y_train), 3), round(model.score(X_test, y_test), 3)")
    dev.cell(
        "from sklearn.metrics import confusion_matrix, classification_report\npred = model.predict(X_test)",
        show="confusion_matrix(y_test, pred)",
    )
    dev.cell("print(classification_report(y_test, pred, digits=3))")
    dev.cell(
        "from sklearn.metrics import roc_auc_score\nproba = model.predict_proba(X_test)[:, 1]",
        show="round(roc_auc_score(y_test, proba), 4)",
        wrong=[("model.predict_proba(X_test)[:, 1]", "model.predict_proba(X_test)")],
    )
    dev.cell(
        "coef = pd.Series(model.coef_[0], index=X.columns).sort_values()", show="coef.round(3)", check=["len(coef)"]
    )
    dev.cell(
        "from sklearn.preprocessing import StandardScaler\nfrom sklearn.pipeline import make_pipeline\n"
        "pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X_train, y_train)",
        show="round(pipe.score(X_test, y_test), 4)",
    )
    dev.cell(
        "for t in [0.3, 0.4, 0.5, 0.6]:\n    p = (proba >= t).astype(int)\n    print(t, (p == y_test).mean().round(3), p.sum())",
        tweaks=[("[0.3, 0.4, 0.5, 0.6]", "[0.2, 0.25, 0.3, 0.35]")],
    )
    dev.section("## Other models")
    dev.cell(
        "from sklearn.ensemble import RandomForestClassifier\n"
        "forest = RandomForestClassifier(n_estimators=150, max_depth=6, random_state=0, n_jobs=1).fit(X_train, y_train)",
        show="round(forest.score(X_test, y_test), 4)",
    )
    dev.cell("pd.Series(forest.feature_importances_, index=X.columns).nlargest(5).round(3)")
    dev.cell(
        "from sklearn.model_selection import cross_val_score\nscores = cross_val_score(pipe, X, y, cv=5, scoring='roc_auc')",
        show="scores.round(3)",
        wrong=[("scoring='roc_auc'", "scoring='auc'")],
    )
    dev.cell(
        "results = {}\nfor C in [0.01, 0.1, 1, 10]:\n"
        "    m = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=1000))\n"
        "    results[C] = cross_val_score(m, X_train, y_train, cv=5, scoring='roc_auc').mean()",
        show="pd.Series(results).round(4)",
    )
    dev.cell("best_C = max(results, key=results.get)", show="best_C")
    dev.cell(
        "final = make_pipeline(StandardScaler(), LogisticRegression(C=best_C, max_iter=1000)).fit(X_train, y_train)\n"
        "round(roc_auc_score(y_test, final.predict_proba(X_test)[:, 1]), 4)"
    )
    dev.cell(
        "test = X_test.assign(churned=y_test, score=final.predict_proba(X_test)[:, 1])",
        show="test.sort_values('score', ascending=False).head()[['tenure_months', 'support_calls', 'score', 'churned']]",
        check=["test.shape", "print(f'{test.shape[0]} rows, {test.shape[1]} columns')", "test.shape, X_test.shape"],
    )
    dev.cell(
        "test['decile'] = pd.qcut(test['score'], 10, labels=False)",
        show="test.groupby('decile')['churned'].mean().round(3)",
    )
    dev.cell("test.groupby('decile')['churned'].mean().plot.bar(title='Churn rate by score decile')", plot=True)
    dev.cell(
        "from sklearn.metrics import RocCurveDisplay\nRocCurveDisplay.from_predictions(y_test, test['score'])",
        plot=True,
        optional=0.3,
    )
    dev.cell(
        "churn.groupby(pd.cut(churn['support_calls'], [-1, 0, 1, 3, 10]), observed=True)['churned'].agg(['mean', 'size']).round(3)"
    )
    dev.cell(
        'print(f"baseline accuracy: {1 - y_test.mean():.3f}")\n'
        'print(f"model accuracy: {(final.predict(X_test) == y_test).mean():.3f}")'
    )
    dev.cell(
        "pd.crosstab(churn['contract'], churn['payment'], values=churn['churned'], aggfunc='mean').round(3)",
        optional=0.3,
    )
