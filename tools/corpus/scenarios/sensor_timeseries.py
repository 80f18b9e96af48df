"""Time series: ten-minute readings of three room sensors with gaps and spikes (files/sensors.csv)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "sensors.ipynb"
FAMILY = "time series"
TITLE = "regularise, smooth and check sensor readings"
ALIASES = {"readings": ("readings", "df", "sensors"), "lab": ("lab", "lab_ts", "lab_df")}


def plan(dev: Developer) -> None:
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (5, 2.8), 'figure.dpi': 60})\n"
        "readings = pd.read_csv('files/sensors.csv')\nreadings.shape",
    )
    dev.cell("readings.head()")
    dev.cell("readings.dtypes", optional=0.3)
    dev.cell(
        "readings['timestamp'] = pd.to_datetime(readings['timestamp'])",
        show="readings['timestamp'].min(), readings['timestamp'].max()",
    )
    dev.cell(
        "readings = readings.sort_values(['sensor', 'timestamp'])",
        show="readings.head()",
        check=["readings.shape", "print(f'{readings.shape[0]} rows, {readings.shape[1]} columns')"],
    )
    dev.cell("readings.groupby('sensor').size()")
    dev.cell("readings['temperature'].describe()")
    dev.cell("readings[readings['temperature'] > 50]")
    dev.cell(
        "readings.loc[readings['temperature'] > 50, 'temperature'] = np.nan",
        show="readings['temperature'].isna().sum()",
    )
    dev.cell(
        "lab = readings[readings['sensor'] == 'lab'].set_index('timestamp')",
        show="lab.index.is_monotonic_increasing",
        check=["lab.shape", "len(lab)", "print(f'{lab.shape[0]} rows, {lab.shape[1]} columns')"],
    )
    dev.cell("gaps = lab.index.to_series().diff()", show="gaps.value_counts().head()", check=["len(gaps)"])
    dev.cell("gaps[gaps > pd.Timedelta('10min')]")
    dev.section("## A regular series")
    dev.cell(
        "lab_regular = lab.resample('10min').mean(numeric_only=True)",
        show="lab_regular['temperature'].isna().sum()",
        wrong=[("lab.resample('10min').mean(numeric_only=True)", "lab.resample('10min').mean()")],
        check=[
            "lab_regular.shape",
            "print(f'{lab_regular.shape[0]} rows, {lab_regular.shape[1]} columns')",
            "lab.shape, lab_regular.shape",
        ],
    )
    dev.cell(
        "lab_regular['temperature'] = lab_regular['temperature'].interpolate(limit=6)",
        show="lab_regular['temperature'].isna().sum()",
    )
    dev.cell(
        "hourly = readings.set_index('timestamp').groupby('sensor')['temperature'].resample('h').mean()",
        show="hourly.unstack(0).head()",
        wrong=[("resample('h')", "resample('hour')")],
        check=["len(hourly)"],
    )
    dev.cell("hourly.unstack(0).plot(title='Hourly temperature')", plot=True)
    dev.cell(
        "daily = hourly.unstack(0).resample('D').agg(['min', 'max']).round(2)",
        show="daily.head()",
        check=["daily.shape", "print(f'{daily.shape[0]} rows, {daily.shape[1]} columns')"],
    )
    dev.cell(
        "lab_regular['rolling'] = lab_regular['temperature'].rolling(6, min_periods=3).mean()",
        show="lab_regular[['temperature', 'rolling']].tail()",
    )
    dev.cell("lab_regular['diff'] = lab_regular['temperature'].diff()", show="lab_regular['diff'].abs().nlargest(3)")
    dev.cell(
        "by_hour = readings.groupby([readings['timestamp'].dt.hour, 'sensor'])['temperature'].mean().unstack()",
        show="by_hour.round(2).head(8)",
        check=["by_hour.shape", "print(f'{by_hour.shape[0]} rows, {by_hour.shape[1]} columns')"],
    )
    dev.cell("by_hour.plot(title='Mean temperature by hour of day')", plot=True, optional=0.4)
    dev.cell("readings.groupby('sensor')[['temperature', 'humidity']].corr().round(3)")
    dev.cell(
        "z = (lab_regular['temperature'] - lab_regular['rolling']) / lab_regular['temperature'].std()",
        show="z.abs().nlargest(3).round(2)",
    )
    dev.cell(
        "import time\n\nfresh = []\nfor i in range(12):\n"
        "    time.sleep(0.25)  # the gateway returns one reading per call\n"
        "    fresh.append(lab_regular['temperature'].iloc[-1])\nlen(fresh)",
        long=("range(12)", "range(2)"),
    )
    dev.cell(
        "readings['day'] = readings['timestamp'].dt.date",
        show="readings.groupby(['day', 'sensor'])['humidity'].mean().unstack().round(1).head()",
    )
    dev.cell(
        "readings.pivot_table(index=readings['timestamp'].dt.day_of_week, columns='sensor', values='temperature', aggfunc='mean').round(2)"
    )
    dev.cell(
        "storage = readings[readings['sensor'] == 'storage'].set_index('timestamp')['temperature']",
        show="storage.resample('6h').mean().round(2).head(8)",
        check=["len(storage)"],
    )
    dev.cell("storage.autocorr(lag=6).round(3)", wrong=[("storage.autocorr(lag=6)", "storage.autocorr(6, 12)")])
    dev.cell("ewm = lab_regular['temperature'].ewm(span=12).mean()", show="ewm.iloc[-5:].round(3)")
    dev.cell(
        "print('lab readings:', len(lab), 'regular slots:', len(lab_regular))\n"
        "print('still missing:', lab_regular['temperature'].isna().sum())\nlab_regular['temperature'].mean().round(3)"
    )
