"""Generated daily shop sales: date indexes, resampling, rolling means, pivots, a merge with store metadata, line plots.

The data is made in the notebook with a seeded generator. The user trips
over string dates (TypeError), a wrong resample rule (ValueError), a
pivot with duplicate entries (ValueError), a missing join key (KeyError),
renames the notebook, restarts and re-runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_08"
NOTEBOOK = "Untitled1.ipynb"
START = "2025-03-12T09:45:00+00:00"


def script(nb: Notebook) -> None:
    imports = nb.add("import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt")
    nb.run(imports)
    make = nb.add(
        "rng = np.random.default_rng(11)\n"
        "days = pd.date_range('2024-01-01', '2024-06-30', freq='D')\n"
        "stores = ['north', 'south', 'east']\n"
        "frames = []\n"
        "for i, store in enumerate(stores):\n"
        "    trend = np.linspace(100, 130 + 20 * i, len(days))\n"
        "    weekly = 15 * (days.dayofweek >= 5)\n"
        "    noise = rng.normal(0, 8, len(days))\n"
        "    frames.append(pd.DataFrame({'date': days.strftime('%Y-%m-%d'), 'store': store,\n"
        "                                'sales': (trend + weekly + noise).round(2)}))\n"
        "sales = pd.concat(frames, ignore_index=True)\n"
        "sales.head()"
    )
    nb.run(make)
    nb.rename("sales_timeseries.ipynb")
    info = nb.add("sales.dtypes")
    nb.run(info)
    window = nb.add("sales[sales['date'] > pd.Timestamp('2024-06-01')].shape")
    nb.run(window)
    parse = nb.add("sales['date'] = pd.to_datetime(sales['date'])\nsales.dtypes")
    nb.run(parse)
    nb.run(window)
    monthly = nb.add("sales.set_index('date').groupby('store')['sales'].resample('month').sum()")
    nb.run(monthly)
    nb.fix(monthly, "resample('month')", "resample('MS')")
    nb.run(monthly)
    nb.fix(monthly, ".sum()", ".sum().unstack(0).round(1)")
    nb.run(monthly)
    pivot = nb.add("wide = sales.pivot(index='date', columns='store', values='sales')\nwide.head()")
    nb.run(pivot)
    dup = nb.add("extra = sales.iloc[[0]]\nsales2 = pd.concat([sales, extra])\nsales2.pivot(index='date', columns='store', values='sales')")
    nb.run(dup)
    nb.fix(dup, "sales2.pivot(index='date', columns='store', values='sales')", "sales2.pivot_table(index='date', columns='store', values='sales', aggfunc='mean').shape")
    nb.run(dup)
    nb.save()
    line = nb.add("wide.plot(figsize=(7, 3.5), lw=0.8)\nplt.ylabel('sales')\nplt.show()")
    nb.run(line)
    rolling = nb.add("smooth = wide.rolling(7).mean()\nsmooth.iloc[:10]")
    nb.run(rolling)
    nb.fix(rolling, "wide.rolling(7).mean()", "wide.rolling(7, min_periods=1).mean()")
    nb.run(rolling)
    smooth_plot = nb.add("ax = smooth.plot(figsize=(8, 4), title='7-day mean')\nax.set_ylabel('sales')\nplt.show()")
    nb.run(smooth_plot)
    weekday = nb.add("sales['weekday'] = sales['date'].dt.day_name()\nsales.groupby('weekday')['sales'].mean().round(1)")
    nb.run(weekday)
    nb.fix(
        weekday,
        "sales.groupby('weekday')['sales'].mean().round(1)",
        "order = ['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday']\n"
        "sales.groupby('weekday')['sales'].mean().reindex(order).round(1)",
    )
    nb.run(weekday)
    meta = nb.add(
        "store_info = pd.DataFrame({'store_name': ['north', 'south', 'east', 'west'],\n"
        "                           'size_m2': [420, 310, 515, 280],\n"
        "                           'opened': pd.to_datetime(['2015-04-01', '2019-09-15', '2021-02-01', '2024-05-01'])})\n"
        "store_info"
    )
    nb.run(meta)
    join = nb.add("full = sales.merge(store_info, on='store')")
    nb.run(join)
    nb.fix(join, "on='store')", "left_on='store', right_on='store_name', how='left')\nfull.shape")
    nb.run(join)
    per_m2 = nb.add("full['sales_per_m2'] = full['sales'] / full['size_m2']\nfull.groupby('store')['sales_per_m2'].mean().round(4)")
    nb.run(per_m2)
    age = nb.add("full['store_age_years'] = (full['date'] - full['opened']).dt.days / 365.25\nfull.groupby('store')['store_age_years'].max().round(1)")
    nb.run(age)
    total = nb.add("print('total sales: ' + full['sales'].sum())")
    nb.run(total)
    nb.fix(total, "print('total sales: ' + full['sales'].sum())", "print(f\"total sales: {full['sales'].sum():,.2f}\")")
    nb.run(total)
    growth = nb.add("monthly_total = wide.resample('MS').sum()\nmonthly_total.pct_change().round(3)")
    nb.run(growth)
    bar = nb.add("monthly_total.plot.bar(figsize=(8, 4), rot=45)\nplt.tight_layout()\nplt.show()")
    nb.run(bar)
    nb.fix(bar, "monthly_total.plot.bar(", "monthly_total.set_axis(monthly_total.index.strftime('%b')).plot.bar(")
    nb.run(bar)
    best_day = nb.add("wide.idxmax()")
    nb.run(best_day)
    lag = nb.add("wide['north'].autocorr(lag=7), wide['north'].autocorr(lag=3)")
    nb.run(lag)
    nb.save()
    nb.restart()
    nb.run_all()
    # 'Run All' stops at the early string-date comparison; the user drops that cell.
    nb.delete(window)
    nb.save()
    nb.restart()
    nb.run_all()
    nb.run(lag)
    nb.fix(lag, "wide['north'].autocorr(lag=7), wide['north'].autocorr(lag=3)", "{k: round(wide['north'].autocorr(lag=k), 3) for k in (1, 3, 7, 14)}")
    nb.run(lag)
    nb.save()
