"""Joins and reshaping: order lines, customers and a catalogue with a duplicate SKU (files/orders.csv, customers.csv, products.parquet)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "orders_join.ipynb"
FAMILY = "joins and reshaping"
TITLE = "join orders, customers and products; pivot and melt"
ALIASES = {
    "orders": ("orders", "lines", "order_lines"),
    "customers": ("customers", "clients", "cust"),
    "merged": ("merged", "full", "joined"),
    "pivot": ("pivot", "table", "by_channel"),
}
SCRATCH = ("import pandas as pd\npd.read_parquet('files/products.parquet').tail(3)",)


def plan(dev: Developer) -> None:
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        then="orders = pd.read_csv('files/orders.csv')\ncustomers = pd.read_csv('files/customers.csv')\n"
        "products = pd.read_parquet('files/products.parquet')\norders.shape, customers.shape, products.shape",
    )
    dev.cell("orders.head()")
    dev.cell("customers.head()", peek=["customers['segment'].value_counts()"])
    dev.cell("products")
    dev.cell("products['sku'].is_unique", peek=["products[products['sku'].duplicated(keep=False)]"])
    dev.cell(
        "merged = orders.merge(products, on='sku', how='left')",
        show="len(orders), len(merged)",
        check=[
            "merged.shape",
            "print(f'{len(merged)} order lines after the merge')",
            "print(f'{merged.shape[0]} rows, {merged.shape[1]} columns')",
            "merged.shape, orders.shape",
        ],
    )
    dev.cell(
        "products = products.drop_duplicates('sku', keep='last')",
        show="products['sku'].is_unique",
        wrong=[("drop_duplicates('sku', keep='last')", "drop_duplicates('SKU', keep='last')")],
        check=["products.shape", "len(products)", "print(f'{products.shape[0]} rows, {products.shape[1]} columns')"],
    )
    dev.cell(
        "merged = orders.merge(products, on='sku', how='left', validate='many_to_one')",
        show="len(merged)",
        wrong=[("validate='many_to_one'", "validate='many-to-one'")],
    )
    dev.cell(
        "merged = merged.merge(customers, on='customer_id', how='left', indicator=True)",
        show="merged['_merge'].value_counts()",
        once=True,
    )
    dev.cell("merged[merged['_merge'] == 'left_only']['customer_id'].unique()")
    dev.cell("merged['amount'] = merged['qty'] * merged['price']", show="merged['amount'].sum().round(2)")
    dev.cell("merged.groupby('city')['amount'].sum().sort_values(ascending=False)")
    dev.cell("merged.groupby(['segment', 'category'])['amount'].sum().unstack().round(2)")
    dev.section("## Reshaping")
    dev.cell(
        "pivot = merged.pivot_table(index='category', columns='channel', values='amount', aggfunc='sum', fill_value=0)",
        show="pivot",
        wrong=[("columns='channel'", "column='channel'")],
        check=["pivot.shape", "pivot", "print(f'{pivot.shape[0]} rows, {pivot.shape[1]} columns')"],
    )
    dev.cell("pivot.div(pivot.sum(axis=1), axis=0).round(3)")
    dev.cell(
        "long = pivot.reset_index().melt(id_vars='category', var_name='channel', value_name='amount')",
        show="long.head(8)",
        wrong=[("id_vars='category'", "id_vars='Category'")],
        check=["long.shape", "print(f'{long.shape[0]} rows, {long.shape[1]} columns')"],
    )
    dev.cell("long.sort_values('amount', ascending=False).head()", optional=0.3)
    dev.cell(
        "merged['month'] = pd.to_datetime(merged['date']).dt.to_period('M')",
        show="merged['month'].value_counts().sort_index()",
        wrong=[("pd.to_datetime(merged['date']).dt.to_period('M')", "merged['date'].dt.to_period('M')")],
    )
    dev.cell(
        "monthly = merged.pivot_table(index='month', columns='category', values='amount', aggfunc='sum')",
        show="monthly.round(0)",
        check=["monthly.shape", "print(f'{monthly.shape[0]} rows, {monthly.shape[1]} columns')"],
    )
    dev.cell("monthly.stack().rename('amount').reset_index().head()")
    dev.cell("monthly.pct_change().round(3)", optional=0.3)
    dev.cell(
        "per_customer = merged.groupby('customer_id').agg(orders=('order_id', 'nunique'), amount=('amount', 'sum'), first=('date', 'min'))",
        show="per_customer.sort_values('amount', ascending=False).head()",
        wrong=[("('order_id', 'nunique')", "('order_id', 'count_unique')")],
        check=["per_customer.shape", "print(f'{per_customer.shape[0]} rows, {per_customer.shape[1]} columns')"],
    )
    dev.cell(
        "customers_full = customers.merge(per_customer, left_on='customer_id', right_index=True, how='left')",
        show="customers_full['orders'].isna().sum()",
        check=["customers_full.shape", "print(f'{customers_full.shape[0]} rows, {customers_full.shape[1]} columns')"],
    )
    dev.cell(
        "customers_full['orders'] = customers_full['orders'].fillna(0).astype(int)",
        show="customers_full['orders'].value_counts().sort_index()",
    )
    dev.cell(
        "q1 = orders[orders['date'] < '2024-04-01']\nq2 = orders[orders['date'] >= '2024-04-01']\n"
        "both = pd.concat({'Q1': q1['channel'].value_counts(), 'Q2': q2['channel'].value_counts()}, axis=1)",
        show="both",
        check=["len(q1), len(q2)", "q1.shape, q2.shape"],
    )
    dev.cell(
        "top_products = merged.groupby('product')['qty'].sum().nlargest(5)\nprint(top_products.index.tolist())\ntop_products",
        tweaks=[("nlargest(5)", "nlargest(3)")],
    )
    dev.cell(
        "wide = merged.pivot(index='order_id', columns='category', values='qty')",
        show="wide.notna().sum()",
        wrong=[("index='order_id'", "index='customer_id'")],
        check=["wide.shape", "print(f'{wide.shape[0]} rows, {wide.shape[1]} columns')"],
    )
    dev.cell("merged.groupby('segment')['amount'].describe().round(1)")
    dev.cell(
        "cross = pd.crosstab(merged['city'], merged['segment'], values=merged['amount'], aggfunc='sum').round(0)",
        show="cross",
    )
    dev.cell("cross.T", optional=0.4)
    dev.cell("merged.drop(columns=['_merge'], inplace=True)", show="merged.columns.tolist()", once=True)
    dev.cell("merged.groupby('channel')[['qty', 'amount']].sum()")
