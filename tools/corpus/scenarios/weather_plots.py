"""Visualisation: a year of daily weather in four cities (files/weather.parquet)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "weather_plots.ipynb"
FAMILY = "visualisation"
TITLE = "plot a year of weather in four cities"
ALIASES = {"weather": ("weather", "df", "wx"), "monthly": ("monthly", "by_month", "month_means")}


def plan(dev: Developer) -> None:
    dev.section("# Weather 2023")
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (5, 3), 'figure.dpi': 60})\n"
        "weather = pd.read_parquet('files/weather.parquet')\nweather.shape",
    )
    dev.cell("weather.head()")
    dev.cell("weather['city'].value_counts()")
    dev.cell("weather.groupby('city')[['t_min', 't_max']].mean().round(1)")
    dev.cell(
        "weather['t_mean'] = (weather['t_min'] + weather['t_max']) / 2",
        show="weather['t_mean'].describe().round(2)",
        wrong=[("weather['t_max']) / 2", "weather['tmax']) / 2")],
    )
    dev.cell(
        "for city, g in weather.groupby('city'):\n    plt.plot(g['date'], g['t_mean'], label=city)\n"
        "plt.legend()\nplt.title('Daily mean temperature')",
        plot=True,
    )
    dev.cell(
        "monthly = weather.groupby(['city', weather['date'].dt.month])['t_mean'].mean().unstack(0).round(1)",
        show="monthly",
        check=["monthly.shape", "print(f'{monthly.shape[0]} rows, {monthly.shape[1]} columns')"],
    )
    dev.cell("monthly.plot(marker='.', title='Monthly mean temperature')", plot=True)
    dev.cell(
        "rain = weather.groupby('city')['precip_mm'].agg(total='sum', wet_days=lambda s: (s > 0).sum())",
        show="rain.round(1)",
        check=["rain", "rain.shape", "print(f'{rain.shape[0]} rows, {rain.shape[1]} columns')"],
    )
    dev.cell("rain['total'].plot.bar(color='tab:blue', title='Total precipitation 2023')", plot=True)
    dev.cell(
        "fig, axes = plt.subplots(2, 2, sharex=True, sharey=True)\n"
        "for ax, (city, g) in zip(axes.flat, weather.groupby('city')):\n"
        "    ax.hist(g['wind_kmh'], bins=20)\n    ax.set_title(city)\nfig.tight_layout()",
        plot=True,
        wrong=[("axes.flat", "axes")],
    )
    dev.cell("weather.groupby('city')['wind_kmh'].quantile(0.95).round(1)")
    dev.cell("weather.plot.scatter(x='humidity', y='precip_mm', alpha=0.2)", plot=True, optional=0.3)
    dev.cell("weather[['t_mean', 'precip_mm', 'wind_kmh', 'humidity']].corr().round(2)")
    dev.cell(
        "hottest = weather.loc[weather.groupby('city')['t_max'].idxmax(), ['city', 'date', 't_max']]",
        show="hottest",
        check=["hottest.shape", "print(f'{hottest.shape[0]} rows, {hottest.shape[1]} columns')"],
    )
    dev.cell(
        "coldest = weather.loc[weather.groupby('city')['t_min'].idxmin(), ['city', 'date', 't_min']]",
        show="coldest",
        check=["coldest", "len(coldest)", "hottest.shape, coldest.shape"],
    )
    dev.cell("weather.boxplot(column='t_mean', by='city')", plot=True)
    dev.cell(
        "rolling = weather.set_index('date').groupby('city')['t_mean'].rolling(7).mean()",
        show="rolling.groupby(level=0).max().round(1)",
        check=["len(rolling)"],
    )
    dev.cell(
        "weather.pivot(index='date', columns='city', values='t_mean').rolling(30).mean().plot(title='30-day rolling mean')",
        plot=True,
        wrong=[
            (
                "weather.pivot(index='date', columns='city', values='t_mean')",
                "weather.pivot(index='date', columns='city')",
            )
        ],
    )
    dev.cell("(weather['precip_mm'] > 10).groupby(weather['city']).sum()")
    dev.cell("frost = weather[weather['t_min'] < 0].groupby('city').size()", show="frost", check=["len(frost)"])
    dev.cell("frost.reindex(weather['city'].unique(), fill_value=0).plot.barh(title='Frost days')", plot=True)
    dev.cell("weather['month'] = weather['date'].dt.month_name().str[:3]", show="weather['month'].unique()")
    dev.cell(
        "pd.pivot_table(weather, index='month', columns='city', values='precip_mm', aggfunc='sum', sort=False).round(0)"
    )
    dev.cell(
        "plt.imshow(weather.pivot(index='city', columns='date', values='t_mean').to_numpy(), aspect='auto', cmap='coolwarm')\n"
        "plt.colorbar()",
        plot=True,
        optional=0.3,
    )
    dev.cell("weather.groupby('city')['humidity'].agg(['min', 'median', 'max'])")
    dev.cell("print(weather.groupby('city')['t_max'].max().to_string())")
    dev.cell(
        "for city in ['Oslo', 'Lisbon']:\n    g = weather[weather['city'] == city]\n"
        "    print(city, g['t_mean'].mean().round(2))\n"
        "    plt.plot(g['date'], g['t_mean'].rolling(14).mean(), label=city)\nplt.legend()",
        plot=True,
    )
    dev.cell("weather.groupby('city')['t_mean'].std().round(2).sort_values()")
