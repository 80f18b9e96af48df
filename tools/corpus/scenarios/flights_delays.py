"""Exploration: a quarter of departures in a regional airport network (files/flights.parquet)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "flight_delays.ipynb"
FAMILY = "exploration"
TITLE = "where and when flights are late"
ALIASES = {"flights": ("flights", "df", "deps"), "summary": ("summary", "carriers", "per_carrier")}
SCRATCH = ("import pandas as pd\npd.read_parquet('files/flights.parquet').sample(3, random_state=1)",)


def plan(dev: Developer) -> None:
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (5, 3), 'figure.dpi': 60})\n"
        "flights = pd.read_parquet('files/flights.parquet')\nflights.shape",
    )
    dev.cell("flights.head()")
    dev.cell("flights.dtypes", optional=0.3)
    dev.cell("flights['cancelled'].mean().round(4)")
    dev.cell("flights['dep_delay'].describe()")
    dev.cell("flights.groupby('carrier')['dep_delay'].agg(['mean', 'median', 'count']).round(1)")
    dev.cell(
        "flights['late'] = flights['dep_delay'] > 15",
        show="flights.groupby('carrier')['late'].mean().round(3).sort_values()",
    )
    dev.cell(
        "flights['hour'] = flights['sched_dep'].str[:2].astype(int)",
        show="flights.groupby('hour')['dep_delay'].mean().round(1)",
        wrong=[("flights['sched_dep'].str[:2].astype(int)", "flights['sched_dep'].astype(int)")],
    )
    dev.cell("flights.groupby('hour')['dep_delay'].mean().plot.bar(title='Mean delay by hour')", plot=True)
    dev.cell("pd.crosstab(flights['origin'], flights['dest'])")
    dev.cell(
        "route = flights.groupby(['origin', 'dest'])['dep_delay'].mean().round(1)",
        show="route.nlargest(5)",
        check=["len(route)"],
    )
    dev.cell(
        "flights['flight_date'] = pd.to_datetime(flights['flight_date'])\nflights['weekday'] = flights['flight_date'].dt.day_name()",
        show="flights.groupby('weekday')['dep_delay'].mean().round(1).sort_values()",
    )
    dev.cell(
        "flights['month'] = flights['flight_date'].dt.month",
        show="flights.pivot_table(index='carrier', columns='month', values='late', aggfunc='mean').round(3)",
    )
    dev.cell("flights[flights['cancelled']].groupby('carrier').size()")
    dev.cell("flights.groupby('carrier')['distance_km'].mean().round(0)", optional=0.3)
    dev.cell(
        "flights['haul'] = pd.cut(flights['distance_km'], [0, 600, 1200, 2000], labels=['short', 'medium', 'long'])",
        show="flights.groupby('haul', observed=True)['dep_delay'].median()",
    )
    dev.cell(
        "worst = flights.nlargest(5, 'dep_delay')[['flight_date', 'flight_no', 'origin', 'dest', 'dep_delay']]",
        show="worst",
        check=["worst.shape", "print(f'{worst.shape[0]} rows, {worst.shape[1]} columns')"],
    )
    dev.cell("flights['dep_delay'].quantile([0.5, 0.75, 0.9, 0.99])")
    dev.cell("flights['dep_delay'].clip(-15, 120).plot.hist(bins=40, title='Departure delay (min)')", plot=True)
    dev.cell(
        "flights.assign(on_time=flights['dep_delay'] <= 5).groupby('origin')['on_time'].mean().round(3).sort_values()"
    )
    dev.cell(
        "daily = flights.groupby('flight_date').agg(n=('flight_no', 'size'), delay=('dep_delay', 'mean'))",
        show="daily.sort_values('delay', ascending=False).head()",
        wrong=[("n=('flight_no', 'size')", "n=('flight_no', 'len')")],
        check=["daily.shape", "len(daily)", "print(f'{daily.shape[0]} rows, {daily.shape[1]} columns')"],
    )
    dev.cell("daily['delay'].rolling(7).mean().dropna().round(1).tail()")
    dev.cell("flights.groupby(['carrier', 'weekday'])['late'].mean().unstack().round(2)")
    dev.cell("len(flights), len(flights.drop_duplicates(['flight_no', 'flight_date']))", optional=0.3)
    dev.cell(r"flights['flight_no'].str.extract(r'([A-Z]+)(\d+)')[1].astype(int).describe()", optional=0.3)
    dev.cell(
        "import time\n\n"
        "def airport_name(code):\n    time.sleep(0.35)  # the reference API is slow\n"
        "    return {'VIE': 'Vienna', 'ZRH': 'Zurich', 'CPH': 'Copenhagen', 'OSL': 'Oslo', 'ARN': 'Stockholm', 'HEL': 'Helsinki'}[code]\n\n"
        "names = {code: airport_name(code) for code in flights['origin'].unique()}\nnames",
        long=("flights['origin'].unique()}", "flights['origin'].unique()[:2]}"),
    )
    dev.cell("flights['origin_name'] = flights['origin'].map(names)", show="flights['origin_name'].isna().sum()")
    dev.cell(
        "summary = flights.groupby('carrier').agg(flights=('flight_no', 'size'), late=('late', 'mean'), cancelled=('cancelled', 'mean'))",
        show="summary.round(3)",
        check=["summary.shape", "summary", "print(f'{summary.shape[0]} rows, {summary.shape[1]} columns')"],
    )
    dev.cell("print(summary.round(3).to_string())\nprint('worst carrier:', summary['late'].idxmax())")
