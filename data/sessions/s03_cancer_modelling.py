"""Modelling the breast-cancer data: train/test split, scaling pipelines, cross-validation, metrics.

The user fits a logistic regression (convergence warning, then a scaler),
compares models with cross-validation, forgets to fit a pipeline
(NotFittedError), passes a wrong metric name (ValueError), tunes C in a loop,
restarts and re-runs everything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_03"
NOTEBOOK = "cancer_model.ipynb"
START = "2025-03-05T10:05:00+00:00"


def script(nb: Notebook) -> None:
    imports = nb.add(
        "import numpy as np\nimport pandas as pd\n"
        "from sklearn.datasets import load_breast_cancer\n"
        "from sklearn.model_selection import train_test_split, cross_val_score\n"
        "from sklearn.linear_model import LogisticRegression"
    )
    nb.run(imports)
    load = nb.add("data = load_breast_cancer()\nX, y = data.data, data.target\nX.shape, y.shape")
    nb.run(load)
    balance = nb.add("np.bincount(y)")
    nb.run(balance)
    nb.fix(balance, "np.bincount(y)", "dict(zip(data.target_names, np.bincount(y)))")
    nb.run(balance)
    split = nb.add(
        "X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)\n"
        "X_train.shape, X_test.shape"
    )
    nb.run(split)
    nb.fix(split, "random_state=0)", "random_state=0, stratify=y)")
    nb.run(split)
    model = nb.add("clf = LogisticRegression()\nclf.fit(X_train, y_train)\nclf.score(X_test, y_test)")
    nb.run(model)
    nb.fix(model, "LogisticRegression()", "LogisticRegression(max_iter=5000)")
    nb.run(model)
    pipe = nb.add(
        "from sklearn.pipeline import make_pipeline\n"
        "from sklearn.preprocessing import StandardScaler\n"
        "pipe = make_pipeline(StandardScaler(), LogisticRegression())\n"
        "pipe.score(X_test, y_test)"
    )
    nb.run(pipe)
    nb.fix(pipe, "pipe.score(X_test, y_test)", "pipe.fit(X_train, y_train)\npipe.score(X_test, y_test)")
    nb.run(pipe)
    coefs = nb.add(
        "coef = pd.Series(pipe[-1].coef_[0], index=data.feature_names)\n"
        "coef.abs().sort_values(ascending=False).head(8).round(3)"
    )
    nb.run(coefs)
    nb.save()
    cv = nb.add("scores = cross_val_score(pipe, X, y, cv=5, scoring='acc')\nscores")
    nb.run(cv)
    nb.fix(cv, "scoring='acc'", "scoring='accuracy'")
    nb.run(cv)
    cv_print = nb.add("print(f'accuracy {scores.mean():.3f} +/- {scores.std():.3f}')")
    nb.run(cv_print)
    compare = nb.add(
        "from sklearn.ensemble import RandomForestClassifier\n"
        "from sklearn.neighbors import KNeighborsClassifier\n"
        "models = {\n"
        "    'logreg': pipe,\n"
        "    'knn': make_pipeline(StandardScaler(), KNeighborsClassifier()),\n"
        "    'forest': RandomForestClassifier(n_estimators=50, random_state=0),\n"
        "}\n"
        "for name, m in models.items():\n"
        "    s = cross_val_score(m, X, y, cv=5)\n"
        "    print(f'{name:>7}: {s.mean():.3f}')"
    )
    nb.run(compare)
    tune = nb.add(
        "results = {}\n"
        "for C in [0.01, 0.1, 1, 10]:\n"
        "    p = make_pipeline(StandardScaler(), LogisticRegression(C=C))\n"
        "    results[C] = cross_val_score(p, X_train, y_train, cv=5).mean()\n"
        "pd.Series(results).round(4)"
    )
    nb.run(tune)
    nb.fix(tune, "[0.01, 0.1, 1, 10]", "[0.01, 0.03, 0.1, 0.3, 1, 3, 10]")
    nb.run(tune)
    best = nb.add("best_C = max(results, key=results.get)\nbest_C")
    nb.run(best)
    final = nb.add(
        "final = make_pipeline(StandardScaler(), LogisticRegression(C=best_C)).fit(X_train, y_train)\n"
        "pred = final.predict(X_test)\n"
        "pred[:20]"
    )
    nb.run(final)
    metrics = nb.add(
        "from sklearn.metrics import accuracy_score, confusion_matrix, classification_report\n"
        "confusion_matrix(y_test, pred)"
    )
    nb.run(metrics)
    report = nb.add("print(classification_report(y_test, pred, target_names=data.target_names))")
    nb.run(report)
    proba = nb.add("proba = final.predict_proba(X_test)[:, 1]\nproba[:5].round(3)")
    nb.run(proba)
    auc = nb.add("from sklearn.metrics import roc_auc_score\nroc_auc_score(y_test, proba)")
    nb.run(auc)
    threshold = nb.add("(proba > 0.3).astype(int) == y_test")
    nb.run(threshold)
    nb.fix(threshold, "(proba > 0.3).astype(int) == y_test", "accuracy_score(y_test, (proba > 0.3).astype(int))")
    nb.run(threshold)
    wrong_shape = nb.add("final.predict(X_test[:, :10])")
    nb.run(wrong_shape)
    nb.delete(wrong_shape)
    nb.save()
    nb.restart()
    nb.run_all()
    nb.run(final)
    grid = nb.add(
        "from sklearn.model_selection import GridSearchCV\n"
        "search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression()),\n"
        "                      {'logisticregression__C': [0.1, 1, 10]}, cv=3)\n"
        "search.fit(X_train, y_train)\n"
        "search.best_params_, round(search.best_score_, 4)"
    )
    nb.run(grid)
    nb.fix(grid, "'logisticregression__C': [0.1, 1, 10]", "'logisticregression__C': [0.1, 0.3, 1, 3]")
    nb.run(grid)
    table = nb.add("pd.DataFrame(search.cv_results_)[['param_logisticregression__C', 'mean_test_score', 'rank_test_score']]")
    nb.run(table)
    nb.save()
