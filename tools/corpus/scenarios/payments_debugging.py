"""Debugging: a payments report whose first draft fails in many ways (files/transactions.csv, files/fx_rates.json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "payments_report.ipynb"
FAMILY = "debugging"
TITLE = "debug a payments report one failure at a time"
ALIASES = {
    "tx": ("tx", "payments", "trans"),
    "ok": ("ok", "settled", "good"),
    "by_merchant": ("by_merchant", "merchants", "per_merchant"),
}


def plan(dev: Developer) -> None:
    dev.imports(
        "import json", "import pandas as pd", "import numpy as np", then="print(pd.__version__, np.__version__)"
    )
    dev.cell(
        "tx = pd.read_csv('files/transactions.csv')",
        show="tx.shape",
        broken=[("'files/transactions.csv'", "'files/transaction.csv'")],
    )
    dev.cell("tx.head()")
    dev.cell("tx.dtypes")
    dev.cell(
        "tx['amount'] = tx['amount'].str.replace(',', '.').astype(float)",
        show="tx['amount'].describe().round(2)",
        broken=[("tx['amount'].str.replace(',', '.').astype(float)", "tx['amount'].astype(float)")],
        once=True,
    )
    dev.cell("with open('files/fx_rates.json') as f:\n    fx = json.load(f)", show="fx['rates']")
    dev.cell(
        "def to_eur(row):\n    return row['amount'] / fx['rates'].get(row['currency'], 1.0)\n\n"
        "tx['amount_eur'] = tx.apply(to_eur, axis=1)",
        show="tx['amount_eur'].sum().round(2)",
        broken=[
            ("fx['rates'].get(row['currency'], 1.0)", "fx['rates'][row['currency']]"),
            ("tx.apply(to_eur, axis=1)", "tx.apply(to_eur)"),
        ],
    )
    dev.cell(
        "tx['timestamp'] = pd.to_datetime(tx['timestamp'])\ntx['day'] = tx['timestamp'].dt.day",
        show="tx.groupby('day')['amount_eur'].sum().round(2).head()",
        broken=[("tx['timestamp'].dt.day", "tx['timestamp'].day")],
    )
    dev.cell(
        "ok = tx[tx['status'] == 'ok']",
        show="len(ok)",
        broken=[("== 'ok'", "== 'OK'")],
        check=["ok.shape", "print(f'{ok.shape[0]} rows, {ok.shape[1]} columns')", "tx.shape, ok.shape"],
    )
    dev.cell(
        "by_merchant = ok.groupby('merchant')['amount_eur'].agg(['sum', 'count'])",
        show="by_merchant.sort_values('sum', ascending=False)",
        broken=[(".agg(['sum', 'count'])", ".agg('sum', 'count')")],
        check=["by_merchant.shape", "print(f'{by_merchant.shape[0]} rows, {by_merchant.shape[1]} columns')"],
    )
    dev.cell(
        "refunds = tx[tx['status'] == 'refunded']\nrefund_rate = len(refunds) / len(tx)",
        show="round(refund_rate, 4)",
        check=["refund_rate", "print(f'{len(refunds)} refunds, rate {refund_rate:.3f}')"],
    )
    dev.cell(
        "by_merchant['declined'] = tx[tx['status'] == 'declined'].groupby('merchant').size()\n"
        "by_merchant['decline_rate'] = by_merchant['declined'] / by_merchant['count']",
        show="by_merchant['decline_rate'].round(3)",
    )
    dev.cell(
        "weekly = ok.set_index('timestamp').resample('W')['amount_eur'].sum()",
        show="weekly.round(2)",
        broken=[("ok.set_index('timestamp').resample('W')", "ok.resample('W')")],
        check=["len(weekly)"],
    )
    dev.cell("tx['hour'] = tx['timestamp'].dt.hour", show="tx.groupby('hour').size().idxmax()")
    dev.cell(
        "def flag_large(amount, limit=200):\n    if amount > limit:\n        return 'large'\n    return 'normal'\n\n"
        "tx['size'] = tx['amount_eur'].apply(flag_large, limit=250)",
        show="tx['size'].value_counts()",
        broken=[("limit=250)", "limit='250')")],
    )
    dev.cell(
        "top = by_merchant.nlargest(3, 'sum')",
        show="top.index.tolist()",
        broken=[("by_merchant.nlargest(3, 'sum')", "by_merchant.nlargest(3)")],
    )
    dev.cell(
        "tx['merchant'].str.contains('+', regex=False).sum()",
        broken=[(", regex=False)", ")")],
    )
    dev.cell(
        "summary = {m: round(v, 2) for m, v in ok.groupby('merchant')['amount_eur'].sum().items()}",
        show="summary",
        broken=[(".items()}", ".iteritems()}")],
    )
    dev.cell(
        "monthly_total = sum(summary.values())",
        show="round(monthly_total, 2)",
        broken=[("sum(summary.values())", "sum(summary)")],
        check=["monthly_total"],
    )
    dev.cell(
        "daily = ok.groupby(ok['timestamp'].dt.date)['amount_eur'].sum()",
        show="daily.describe().round(2)",
        check=["len(daily)"],
    )
    dev.cell("daily.idxmax(), daily.max().round(2)")
    dev.cell(
        "assert abs(ok['amount_eur'].sum() - monthly_total) < 0.05, 'totals differ'\nprint('totals agree')",
        broken=[("< 0.05", "< 1e-9")],
    )
    dev.cell(
        "pivot = tx.pivot_table(index='merchant', columns='status', values='amount_eur', aggfunc='count', fill_value=0)",
        show="pivot",
        check=["pivot.shape", "print(f'{pivot.shape[0]} rows, {pivot.shape[1]} columns')"],
    )
    dev.cell("pivot['total'] = pivot.sum(axis=1)", show="pivot", mutates=True)
    dev.cell("pivot.loc['CinemaX']", broken=[("'CinemaX'", "'Cinemax'")])
    dev.cell(
        "for merchant, group in ok.groupby('merchant'):\n    print(f\"{merchant:<10} {group['amount_eur'].mean():8.2f}\")",
        broken=[("group['amount_eur'].mean():8.2f", "group['amount_eur'].mean:8.2f")],
    )
    dev.cell("tx.duplicated(subset=['timestamp', 'merchant', 'amount']).sum()", optional=0.3)
    dev.cell("tx['amount_eur'].quantile([0.5, 0.9, 0.99]).round(2)")
    dev.cell(
        "def parse_amount(text):\n    return float(text.replace(',', '.'))\n\n"
        "raw = pd.read_csv('files/transactions.csv', dtype={'amount': str})\nraw['amount'].map(parse_amount).sum().round(2)"
    )
    dev.cell("np.isclose(raw['amount'].map(parse_amount), tx['amount']).all()")
    dev.cell(
        "import time\n\n"
        "def live_rate(currency):\n    time.sleep(0.4)  # the rates API is slow\n    return fx['rates'].get(currency, 1.0)\n\n"
        "live = {c: live_rate(c) for c in tx['currency'].unique()}\nlive",
        long=("for c in tx['currency'].unique()}", "for c in ['USD', 'GBP']}"),
    )
