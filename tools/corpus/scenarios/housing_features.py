"""Feature engineering: apartment sales turned into model features (files/housing.parquet)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "housing_features.ipynb"
FAMILY = "feature engineering"
TITLE = "derive features for an apartment price model"
ALIASES = {"homes": ("homes", "df", "flats"), "features": ("features", "X", "feats")}


def plan(dev: Developer) -> None:
    dev.imports(
        "import pandas as pd",
        "import numpy as np",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (4.5, 3), 'figure.dpi': 60})\n"
        "homes = pd.read_parquet('files/housing.parquet')\nhomes.shape",
    )
    dev.cell("homes.head()")
    dev.cell("homes.dtypes")
    dev.cell("homes.describe().round(1)", tweaks=[("describe()", "describe(percentiles=[0.1, 0.9])")])
    dev.cell(
        "homes['price_per_m2'] = (homes['price'] / homes['area_m2']).round(0)",
        show="homes.groupby('neighbourhood')['price_per_m2'].median().sort_values()",
    )
    dev.cell(
        "homes['age'] = homes['sale_date'].dt.year - homes['year_built']",
        show="homes['age'].describe()",
        wrong=[("homes['sale_date'].dt.year", "homes['sale_date'].year")],
    )
    dev.cell("homes['bathrooms'].isna().sum()")
    dev.cell(
        "homes['bathrooms'] = homes['bathrooms'].fillna(homes.groupby('rooms')['bathrooms'].transform('median'))",
        show="homes['bathrooms'].value_counts()",
    )
    dev.cell("homes['log_price'] = np.log(homes['price'])", show="homes[['price', 'log_price']].skew().round(3)")
    dev.cell(
        "homes['area_bin'] = pd.qcut(homes['area_m2'], 4, labels=['S', 'M', 'L', 'XL'])",
        show="homes['area_bin'].value_counts()",
        wrong=[("labels=['S', 'M', 'L', 'XL']", "labels=['S', 'M', 'L']")],
    )
    dev.cell("homes.groupby('area_bin', observed=True)['price'].mean().round(0)")
    dev.cell(
        "label_order = {'A': 7, 'B': 6, 'C': 5, 'D': 4, 'E': 3, 'F': 2, 'G': 1}\n"
        "homes['energy_score'] = homes['energy_label'].map(label_order)",
        show="homes['energy_score'].value_counts().sort_index()",
    )
    dev.cell(
        "dummies = pd.get_dummies(homes['neighbourhood'], prefix='hood', dtype=int)",
        show="dummies.sum().sort_values()",
        check=["dummies.shape", "print(f'{dummies.shape[0]} rows, {dummies.shape[1]} columns')"],
    )
    dev.cell(
        "homes = pd.concat([homes, dummies], axis=1)",
        show="homes.shape",
        once=True,
        check=["len(homes)", "print(f'{homes.shape[1]} columns now')"],
    )
    dev.cell(
        "seasons = {12: 'winter', 1: 'winter', 2: 'winter', 3: 'spring', 4: 'spring', 5: 'spring',\n"
        "           6: 'summer', 7: 'summer', 8: 'summer', 9: 'autumn', 10: 'autumn', 11: 'autumn'}\n"
        "homes['season'] = homes['sale_date'].dt.month.map(seasons)",
        show="homes['season'].value_counts()",
    )
    dev.cell("homes.groupby('season')['price_per_m2'].median()", optional=0.3)
    dev.cell(
        "homes['rooms_per_100m2'] = homes['rooms'] / homes['area_m2'] * 100",
        show="homes['rooms_per_100m2'].describe().round(2)",
    )
    dev.cell("homes['top_floor'] = homes['floor'] >= homes['floor'].quantile(0.9)", show="homes['top_floor'].mean()")
    dev.cell(
        "homes.corr(numeric_only=True)['price'].sort_values(ascending=False).round(3)",
        wrong=[("homes.corr(numeric_only=True)", "homes.corr()")],
    )
    dev.section("## Model-ready features")
    dev.cell(
        "from sklearn.preprocessing import StandardScaler\n"
        "num_cols = ['area_m2', 'rooms', 'bathrooms', 'age', 'energy_score']\n"
        "scaled = StandardScaler().fit_transform(homes[num_cols])",
        show="scaled.mean(axis=0).round(3), scaled.std(axis=0).round(3)",
        check=["scaled.shape", "num_cols", "print(f'{scaled.shape[0]} rows, {scaled.shape[1]} columns')"],
    )
    dev.cell(
        "features = homes[num_cols + list(dummies.columns) + ['has_garden']].astype(float)",
        show="features.shape",
        wrong=[("['has_garden']", "['garden']")],
        check=[
            "features.shape",
            "print(f'{features.shape[0]} rows, {features.shape[1]} columns')",
            "features.shape, homes.shape",
        ],
    )
    dev.cell("features.isna().sum().sum()")
    dev.cell(
        "hood_mean = homes.groupby('neighbourhood')['log_price'].mean()\nhomes['hood_te'] = homes['neighbourhood'].map(hood_mean)",
        show="hood_mean.round(3)",
    )
    dev.cell(
        "from sklearn.linear_model import LinearRegression\nfrom sklearn.model_selection import cross_val_score\n"
        "scores = cross_val_score(LinearRegression(), features, homes['log_price'], cv=5, scoring='r2')",
        show="scores.round(3), scores.mean().round(3)",
        check=["scores"],
    )
    dev.cell(
        "features['area_x_garden'] = features['area_m2'] * features['has_garden']",
        show="features.shape",
        mutates=True,
    )
    dev.cell("cross_val_score(LinearRegression(), features, homes['log_price'], cv=5).mean().round(4)")
    dev.cell(
        "model = LinearRegression().fit(features, homes['log_price'])\n"
        "coefs = pd.Series(model.coef_, index=features.columns).round(3)",
        show="coefs.sort_values()",
        check=["len(coefs)"],
    )
    dev.cell("homes.plot.scatter(x='area_m2', y='price', alpha=0.3)", plot=True)
    dev.cell("homes['price'].plot.hist(bins=40)", plot=True, optional=0.4)
    dev.cell("homes[['area_m2', 'rooms', 'age', 'price_per_m2']].quantile([0.05, 0.5, 0.95]).round(1)")
    dev.cell("homes.sample(3, random_state=0)[['neighbourhood', 'area_m2', 'age', 'energy_score', 'price']]")
    dev.cell(
        "print(f'{features.shape[1]} features for {features.shape[0]} sales')\n"
        "print('strongest:', coefs.abs().idxmax())\ncoefs.abs().nlargest(3)"
    )
