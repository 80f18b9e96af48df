"""Joins and reshaping: a wide table of term grades turned long and back (files/grades.csv)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "grades.ipynb"
FAMILY = "joins and reshaping"
TITLE = "melt, pivot and rank school grades"
ALIASES = {
    "grades": ("grades", "wide", "scores"),
    "long": ("long", "tidy", "melted"),
    "by_term": ("by_term", "terms", "term_means"),
}


def plan(dev: Developer) -> None:
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (4.5, 3), 'figure.dpi': 60})\n"
        "grades = pd.read_csv('files/grades.csv')\ngrades.shape",
    )
    dev.cell("grades.head()")
    dev.cell("grades.isna().sum().sum()")
    dev.cell(
        "long = grades.melt(id_vars=['student', 'class'], var_name='exam', value_name='score')",
        show="long.head()",
        wrong=[("id_vars=['student', 'class']", "id_vars=['student', 'Class']")],
        check=[
            "long.shape",
            "print(f'{len(long)} scores in long format')",
            "print(f'{long.shape[0]} rows, {long.shape[1]} columns')",
            "grades.shape, long.shape",
        ],
    )
    dev.cell("long[['subject', 'term']] = long['exam'].str.split('_t', expand=True)", show="long.head()")
    dev.cell("long['term'] = long['term'].astype(int)", show="long.dtypes")
    dev.cell("long.groupby('subject')['score'].mean().round(2)")
    dev.cell("long.pivot_table(index='class', columns='subject', values='score', aggfunc='mean').round(1)")
    dev.cell(
        "by_term = long.groupby(['subject', 'term'])['score'].mean().unstack()",
        show="by_term.round(2)",
        check=["by_term.shape", "by_term", "print(f'{by_term.shape[0]} rows, {by_term.shape[1]} columns')"],
    )
    dev.cell("by_term.diff(axis=1).round(2)")
    dev.cell(
        "student_avg = long.groupby('student')['score'].mean()",
        show="student_avg.describe().round(2)",
        check=["len(student_avg)"],
    )
    dev.cell("student_avg.nlargest(5)")
    dev.cell(
        "long['rank'] = long.groupby(['subject', 'term'])['score'].rank(ascending=False, method='min')",
        show="long[long['rank'] == 1][['student', 'subject', 'term', 'score']]",
    )
    dev.cell(
        "wide_again = long.pivot(index='student', columns=['subject', 'term'], values='score')",
        show="wide_again.shape",
        wrong=[("index='student'", "index='class'")],
        check=["wide_again.shape", "print(f'{wide_again.shape[0]} rows, {wide_again.shape[1]} columns')"],
    )
    dev.cell(
        "wide_again.columns = [f'{s}_t{t}' for s, t in wide_again.columns]",
        show="wide_again.columns[:4].tolist()",
        once=True,
    )
    dev.cell(
        "(wide_again.reindex(columns=grades.columns[2:]).to_numpy() == grades.set_index('student').iloc[:, 1:].to_numpy()).mean().round(3)"
    )
    dev.cell(
        "long['score'] = long['score'].fillna(long.groupby(['student', 'subject'])['score'].transform('mean'))",
        show="long['score'].describe().round(2)",
    )
    dev.cell(
        "grade = pd.cut(long['score'], bins=[0, 50, 65, 80, 90, 100], labels=['F', 'D', 'C', 'B', 'A'], include_lowest=True)",
        show="grade.value_counts().sort_index()",
        wrong=[("labels=['F', 'D', 'C', 'B', 'A']", "labels=['F', 'D', 'C', 'B']")],
    )
    dev.cell("long['grade'] = grade", show="pd.crosstab(long['subject'], long['grade'])")
    dev.cell("improved = by_term[3] - by_term[1]", show="improved.round(2)", check=["improved"])
    dev.cell(
        "per_class = long.groupby(['class', 'subject'])['score'].agg(['mean', 'std']).round(2)",
        show="per_class.head(8)",
        check=["per_class.shape", "print(f'{per_class.shape[0]} rows, {per_class.shape[1]} columns')"],
    )
    dev.cell("per_class['mean'].unstack()", optional=0.3)
    dev.cell(
        "top3 = long.sort_values('score', ascending=False).groupby('subject').head(3)",
        show="top3[['subject', 'student', 'score']].sort_values('subject')",
        check=["top3.shape", "len(top3)", "print(f'{top3.shape[0]} rows, {top3.shape[1]} columns')"],
    )
    dev.cell("grades.set_index(['student', 'class']).stack().head(6)")
    dev.cell("wide_again.filter(like='_t3').corr().round(2)")
    dev.cell("long['passed'] = long['score'] >= 50", show="long.groupby('class')['passed'].mean().round(3)")
    dev.cell(
        "# moderation: everyone gets two extra points\nlong['score'] = long['score'] + 2",
        show="long['score'].mean().round(2)",
        mutates=True,
    )
    dev.cell(
        "report = long.pivot_table(index='student', columns='subject', values='score', aggfunc='mean').round(1)",
        show="report.head()",
        check=["report.shape", "print(f'{report.shape[0]} rows, {report.shape[1]} columns')"],
    )
    dev.cell("report.idxmax(axis=1).value_counts()")
    dev.cell("print(report.loc['S001'].to_dict())")
    dev.cell("by_term.T.plot(marker='o', title='Mean score by term')", plot=True)
