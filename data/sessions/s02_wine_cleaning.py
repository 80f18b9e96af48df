"""Cleaning the wine data: injected missing values, dtypes, renaming columns, a merge with a lookup table.

The user damages a copy of the data on purpose (seeded), then repairs it:
fills and drops NaNs, converts a text column to numbers (ValueError first),
renames columns and trips over the old names (KeyError), merges with a
cultivar table (a dtype mismatch first), restarts and re-runs from the top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_02"
NOTEBOOK = "wine_cleaning.ipynb"
START = "2025-03-04T13:40:00+00:00"


def script(nb: Notebook) -> None:
    imports = nb.add("import numpy as np\nimport pandas as pd\nfrom sklearn.datasets import load_wine")
    nb.run(imports)
    load = nb.add("wine = load_wine(as_frame=True)\nraw = wine.frame.copy()\nraw.shape")
    nb.run(load)
    peek = nb.add("raw.iloc[:5, :6]")
    nb.run(peek)
    damage = nb.add(
        "rng = np.random.default_rng(42)\n"
        "dirty = raw.copy()\n"
        "for col in ['alcohol', 'magnesium', 'color_intensity']:\n"
        "    dirty.loc[rng.choice(len(dirty), size=12, replace=False), col] = np.nan\n"
        "dirty['hue'] = dirty['hue'].round(2).astype(str)\n"
        "dirty.loc[[3, 17, 90], 'hue'] = 'n/a'\n"
        "dirty.isna().sum()[lambda s: s > 0]"
    )
    nb.run(damage)
    nb.run(peek)
    missing = nb.add("dirty.isna().mean().round(3).sort_values(ascending=False).head()")
    nb.run(missing)
    hue_mean = nb.add("dirty['hue'].mean()")
    nb.run(hue_mean)
    to_num = nb.add("dirty['hue'] = dirty['hue'].astype(float)")
    nb.run(to_num)
    nb.fix(to_num, "dirty['hue'].astype(float)", "pd.to_numeric(dirty['hue'], errors='coerce')")
    nb.run(to_num)
    nb.run(hue_mean)
    dtypes = nb.add("dirty.dtypes.value_counts()")
    nb.run(dtypes)
    nb.save()
    fill = nb.add(
        "clean = dirty.copy()\n"
        "clean['alcohol'] = clean['alcohol'].fillna(clean['alcohol'].median())\n"
        "clean.isna().sum().sum()"
    )
    nb.run(fill)
    nb.fix(
        fill,
        "clean['alcohol'] = clean['alcohol'].fillna(clean['alcohol'].median())",
        "for col in ['alcohol', 'magnesium', 'color_intensity', 'hue']:\n"
        "    clean[col] = clean.groupby('target')[col].transform(lambda s: s.fillna(s.median()))",
    )
    nb.run(fill)
    check = nb.add("print(clean[['alcohol', 'magnesium']].describe().round(2))")
    nb.run(check)
    rename = nb.add(
        "clean = clean.rename(columns={'od280/od315_of_diluted_wines': 'od_ratio',\n"
        "                              'color_intensity': 'color',\n"
        "                              'target': 'cultivar'})\n"
        "clean.columns.tolist()"
    )
    nb.run(rename)
    by_target = nb.add("clean.groupby('target')['alcohol'].mean()")
    nb.run(by_target)
    nb.fix(by_target, "groupby('target')", "groupby('cultivar')")
    nb.run(by_target)
    nb.run(rename)
    nb.run(by_target)
    lookup = nb.add(
        "cultivars = pd.DataFrame({'cultivar': ['0', '1', '2'],\n"
        "                          'name': ['Barolo', 'Grignolino', 'Barbera'],\n"
        "                          'region': ['Piedmont', 'Piedmont', 'Piedmont']})\n"
        "cultivars"
    )
    nb.run(lookup)
    merge = nb.add("merged = clean.merge(cultivars, on='cultivar', how='left')\nmerged[['cultivar', 'name']].head()")
    nb.run(merge)
    nb.fix(lookup, "'cultivar': ['0', '1', '2']", "'cultivar': [0, 1, 2]")
    nb.run(lookup)
    nb.run(merge)
    counts = nb.add("merged['name'].value_counts()")
    nb.run(counts)
    validate = nb.add("merged = clean.merge(cultivars, on='cultivar', how='left', validate='many_to_one')\nlen(merged)")
    nb.run(validate)
    dup = nb.add("dupes = pd.concat([clean, clean.iloc[:4]])\ndupes.duplicated().sum()")
    nb.run(dup)
    dedup = nb.add("dupes = dupes.drop_duplicates().reset_index(drop=True)\ndupes.shape")
    nb.run(dedup)
    nb.run(dup)
    category = nb.add("merged['name'] = merged['name'].astype('category')\nmerged['name'].cat.categories")
    nb.run(category)
    mem = nb.add("merged.memory_usage(deep=True).sum()")
    nb.run(mem)
    outliers = nb.add(
        "z = (merged['magnesium'] - merged['magnesium'].mean()) / merged['magnesium'].std()\n"
        "merged.loc[z.abs() > 3, ['name', 'magnesium']]"
    )
    nb.run(outliers)
    clip = nb.add("merged['magnesium'] = merged['magnesium'].clip(upper=merged['magnesium'].quantile(0.99))\nmerged['magnesium'].max()")
    nb.run(clip)
    nb.run(outliers)
    nb.save()
    nb.restart()
    nb.run(by_target)
    nb.run_all()
    # 'Run All' stopped at the mean of the still-textual hue column: that cell only
    # worked before because the conversion below it had been run first.
    nb.edit(hue_mean, "pd.to_numeric(dirty['hue'], errors='coerce').mean()")
    nb.run_all()
    final = nb.add("merged.drop(columns=['region']).head(3)")
    nb.run(final)
    nb.fix(final, "merged.drop(columns=['region']).head(3)", "merged.drop(columns=['region', 'proline']).head(3).T")
    nb.run(final)
    nb.save()
