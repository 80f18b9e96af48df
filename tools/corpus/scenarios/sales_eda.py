"""Exploration: a first look at a retail chain's 2024 orders (files/sales.csv)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "sales_eda.ipynb"
FAMILY = "exploration"
TITLE = "first look at a retail chain's orders"
ALIASES = {"df": ("df", "sales", "orders"), "by_store": ("by_store", "store_totals", "stores")}
SCRATCH = ("import pandas as pd\npd.read_csv('files/sales.csv', nrows=3).T",)


def plan(dev: Developer) -> None:
    dev.section("# Sales 2024: first look")
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (5, 3), 'figure.dpi': 60})\n"
        "df = pd.read_csv('files/sales.csv')\ndf.shape",
    )
    dev.cell("df.head()", tweaks=[("df.head(", "df.tail(")])
    dev.cell(dev.pick("df.dtypes", "df.info()"), peek=["df.columns.tolist()", "len(df)"])
    dev.cell("df.describe()", tweaks=[("df.describe()", "df.describe(include='all').T")])
    dev.cell("df.isna().sum()", peek=["df['rating'].isna().mean()"])
    dev.section("## Dates and revenue")
    dev.cell(
        "df['date'] = pd.to_datetime(df['date'])",
        show="df['date'].dt.month.value_counts().sort_index()",
        wrong=[("df['date'])", "df['Date'])")],
    )
    dev.cell(
        "df['revenue'] = df['units'] * df['unit_price'] * (1 - df['discount'])",
        show="df['revenue'].sum().round(2)",
        wrong=[("df['unit_price']", "df['price']")],
    )
    dev.cell("df['store'].value_counts()", peek=["df['store'].nunique()"])
    dev.cell(
        "by_store = df.groupby('store')['revenue'].agg(['sum', 'mean', 'count']).round(2)",
        show="by_store.sort_values('sum', ascending=False)",
        wrong=[
            (
                "df.groupby('store')['revenue'].agg(['sum', 'mean', 'count'])",
                "df.groupby('store').agg(['sum', 'mean', 'count'])",
            )
        ],
        check=["by_store.shape", "by_store", "print(f'{by_store.shape[0]} rows, {by_store.shape[1]} columns')"],
    )
    dev.cell("df.groupby('category')['units'].sum().sort_values(ascending=False)")
    dev.cell(
        "pd.crosstab(df['store'], df['payment'])",
        tweaks=[("df['payment'])", "df['payment'], normalize='index').round(2)")],
    )
    dev.cell("by_store['sum'].sort_values().plot.barh(title='Revenue by store')", plot=True)
    dev.cell(
        "monthly = df.set_index('date').resample('MS')['revenue'].sum()",
        show="monthly.round(2)",
        wrong=[("resample('MS')", "resample('month')")],
        check=["len(monthly)"],
    )
    dev.cell("monthly.plot(marker='o', title='Monthly revenue')", plot=True, optional=0.3)
    dev.cell(
        "top = df.groupby('product')['revenue'].sum().nlargest(5)\nprint('Top products by revenue:')\ntop.round(2)",
        tweaks=[("nlargest(5)", "nsmallest(5)")],
    )
    dev.cell("df['rating'].value_counts(dropna=False).sort_index()")
    dev.cell("df.groupby('category')['rating'].mean().round(2)", peek=["df['category'].unique()"])
    dev.cell("df[df['discount'] > 0].groupby('discount')['units'].mean()", optional=0.3)
    dev.section("## When do people buy?")
    dev.cell(
        "df['weekday'] = df['date'].dt.day_name()",
        show="df['weekday'].value_counts()",
        wrong=[("dt.day_name()", "dt.weekday_name")],
    )
    dev.cell(
        "pd.pivot_table(df, index='weekday', columns='category', values='revenue', aggfunc='sum').round(0)",
        wrong=[("values='revenue'", "values='Revenue'")],
    )
    dev.cell(
        "# prices in the export are net; add 19% VAT\ndf['unit_price'] = df['unit_price'] * 1.19",
        show="df['unit_price'].describe().round(2)",
        mutates=True,
    )
    dev.cell("df.loc[df['revenue'].idxmax()]")
    dev.cell("(df['revenue'] > 100).mean()", tweaks=[("> 100", "> 50")])
    dev.cell(
        "q1, q3 = df['revenue'].quantile([0.25, 0.75])\niqr = q3 - q1\n"
        "outliers = df[df['revenue'] > q3 + 1.5 * iqr]\nlen(outliers), outliers['product'].value_counts().head(3).to_dict()",
        wrong=[("q1, q3 = df['revenue'].quantile([0.25, 0.75])", "q1, q3 = df['revenue'].quantile(0.25, 0.75)")],
        check=["iqr", "q1, q3"],
    )
    dev.cell(
        "import time\n\n"
        "def manager_of(store):\n"
        "    time.sleep(0.4)  # the staff directory answers slowly\n"
        "    return {'Northgate': 'K. Berg', 'Riverside': 'A. Silva', 'Harbour': 'J. Moreau'}.get(store, 'vacant')\n\n"
        "managers = {store: manager_of(store) for store in by_store.index}\nmanagers",
        long=("for store in by_store.index}", "for store in by_store.index[:3]}"),
    )
    dev.cell("df.groupby(['store', 'category'])['revenue'].sum().unstack().round(0)")
    dev.cell("df['revenue'].plot.hist(bins=30, title='Order revenue')", plot=True)
    dev.cell(
        "corr = df[['units', 'unit_price', 'discount', 'revenue', 'rating']].corr().round(2)",
        show="corr",
        tweaks=[("corr()", "corr(method='spearman')")],
        check=["corr.shape", "print(f'{corr.shape[0]} rows, {corr.shape[1]} columns')"],
    )
    dev.cell(
        'print(f"orders: {len(df)}")\nprint(f"revenue: {df[\'revenue\'].sum():,.2f}")\n'
        "print(f\"mean basket: {df['units'].mean():.2f} units\")"
    )
    dev.cell("df.sort_values('revenue', ascending=False).head()[['date', 'store', 'product', 'revenue']]")
    dev.cell("df['payment'].value_counts(normalize=True).round(3)", optional=0.3)
    dev.cell("display(by_store.head(3))\ndf['category'].nunique()")
