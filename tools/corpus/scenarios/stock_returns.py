"""Time series: daily closing prices of five stocks (files/prices.csv)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "stock_returns.ipynb"
FAMILY = "time series"
TITLE = "returns, volatility and drawdowns of five stocks"
ALIASES = {"prices": ("prices", "px", "close"), "returns": ("returns", "rets", "daily")}


def plan(dev: Developer) -> None:
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (5, 3), 'figure.dpi': 60})\n"
        "prices = pd.read_csv('files/prices.csv', parse_dates=['date'], index_col='date')\nprices.shape",
    )
    dev.cell("prices.head()")
    dev.cell("prices.isna().sum()")
    dev.cell(
        "prices = prices.ffill()",
        show="prices.loc['2023-05'].iloc[:4]",
        check=["prices.shape", "print(f'{prices.shape[0]} rows, {prices.shape[1]} columns')"],
    )
    dev.cell(
        "returns = prices.pct_change().dropna()",
        show="returns.head()",
        wrong=[("prices.pct_change()", "prices.pct_change")],
        check=[
            "returns.shape",
            "print(f'{len(returns)} days of returns for {returns.shape[1]} stocks')",
            "print(f'{returns.shape[0]} rows, {returns.shape[1]} columns')",
            "prices.shape, returns.shape",
        ],
    )
    dev.cell("returns.describe().round(4)")
    dev.cell("(returns.std() * np.sqrt(252)).round(3)")
    dev.cell(
        "cumulative = (1 + returns).cumprod()",
        show="cumulative.iloc[-1].round(3)",
        check=["cumulative.shape", "print(f'{cumulative.shape[0]} rows, {cumulative.shape[1]} columns')"],
    )
    dev.cell("cumulative.plot(title='Growth of 1 unit')", plot=True)
    dev.cell("returns.corr().round(2)")
    dev.cell("rolling_vol = returns.rolling(21).std() * np.sqrt(252)", show="rolling_vol.dropna().iloc[-3:].round(3)")
    dev.cell("rolling_vol['VANT'].plot(title='VANT 21-day volatility')", plot=True, optional=0.3)
    dev.cell("drawdown = cumulative / cumulative.cummax() - 1", show="drawdown.min().round(3)")
    dev.cell("drawdown.idxmin()")
    dev.cell(
        "monthly = prices.resample('ME').last().pct_change().dropna()",
        show="monthly.round(3).tail()",
        wrong=[("resample('ME')", "resample('M')")],
        check=["monthly.shape", "print(f'{monthly.shape[0]} rows, {monthly.shape[1]} columns')"],
    )
    dev.cell("monthly.mean().sort_values(ascending=False).round(4)")
    dev.cell("best_month = monthly.stack().idxmax()", show="best_month, monthly.stack().max().round(3)")
    dev.cell(
        "weights = np.array([0.3, 0.2, 0.2, 0.15, 0.15])\nportfolio = returns @ weights",
        show="portfolio.mean().round(5), portfolio.std().round(5)",
        wrong=[("0.15, 0.15])", "0.15])")],
    )
    dev.cell(
        "sharpe = portfolio.mean() / portfolio.std() * np.sqrt(252)",
        show="round(sharpe, 3)",
        check=["sharpe", "print(f'Sharpe ratio: {sharpe:.2f}')"],
    )
    dev.cell(
        "beta = returns.apply(lambda r: np.cov(r, portfolio)[0, 1] / portfolio.var())",
        show="beta.round(3)",
        check=["beta", "len(beta)"],
    )
    dev.cell("(prices.groupby(prices.index.year).last() / prices.groupby(prices.index.year).first() - 1).round(3)")
    dev.cell("(returns > 0).mean().round(3)")
    dev.cell("returns.abs().idxmax()", optional=0.3)
    dev.cell(
        "ma = prices['ORBX'].rolling(20).mean()\nsignal = (prices['ORBX'] > ma).astype(int)",
        show="signal.value_counts()",
        tweaks=[("rolling(20)", "rolling(50)")],
    )
    dev.cell(
        "strategy = returns['ORBX'] * signal.shift(1).reindex(returns.index)",
        show="(1 + strategy.fillna(0)).prod().round(3)",
        check=["len(strategy)"],
    )
    dev.cell("returns['ORBX'].plot.hist(bins=50)", plot=True, optional=0.4)
    dev.cell("returns.skew().round(3), returns.kurt().round(3)")
    dev.cell("prices.loc['2024-03'].mean().round(2)", wrong=[("prices.loc['2024-03']", "prices['2024-03']")])
    dev.cell("prices.index.to_series().diff().dt.days.value_counts()", optional=0.3)
    dev.cell(
        "# KELP had a 1:2 reverse split on 2024-01-02; adjust the earlier prices\n"
        "prices.loc[:'2024-01-01', 'KELP'] = prices.loc[:'2024-01-01', 'KELP'] * 2",
        show="prices['KELP'].iloc[[0, -1]]",
        mutates=True,
    )
    dev.cell(
        "print('best:', cumulative.iloc[-1].idxmax(), 'worst:', cumulative.iloc[-1].idxmin())\n"
        "cumulative.iloc[-1].sort_values().round(3)"
    )
