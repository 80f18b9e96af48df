"""Cleaning: a hand-exported customer survey with mixed spellings, units and missing markers (files/survey.csv)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "survey_cleaning.ipynb"
FAMILY = "cleaning"
TITLE = "clean a messy survey export"
ALIASES = {"raw": ("raw", "survey", "df"), "clean": ("clean", "tidy", "survey_clean")}


def plan(dev: Developer) -> None:
    dev.section("# Survey export: cleaning")
    dev.imports("import pandas as pd", "import numpy as np", then="raw = pd.read_csv('files/survey.csv')\nraw.shape")
    dev.cell("raw.head()")
    dev.cell("raw.dtypes", peek=["raw.columns.tolist()"])
    dev.cell(
        "raw['respondent_id'].duplicated().sum()",
        peek=["raw[raw['respondent_id'].duplicated(keep=False)].sort_values('respondent_id').head(4)"],
    )
    dev.cell(
        "raw = raw.drop_duplicates()",
        show="len(raw)",
        wrong=[("raw.drop_duplicates()", "raw.drop_duplicate()")],
        check=[
            "raw.shape",
            "print(f'{len(raw)} responses after dropping duplicates')",
            "print(f'{raw.shape[0]} rows, {raw.shape[1]} columns')",
        ],
    )
    dev.cell("raw['age'].unique()[:25]")
    dev.cell(
        "raw['age_num'] = pd.to_numeric(raw['age'], errors='coerce')",
        show="raw['age_num'].describe()",
        wrong=[("pd.to_numeric(raw['age'], errors='coerce')", "pd.to_numeric(raw['age'])")],
    )
    dev.cell(
        "raw.loc[(raw['age_num'] < 16) | (raw['age_num'] > 100), 'age_num'] = np.nan",
        show="raw['age_num'].isna().sum()",
    )
    dev.cell("raw['gender'].value_counts(dropna=False)")
    dev.cell(
        "gender_map = {'f': 'female', 'female': 'female', 'm': 'male', 'male': 'male', 'diverse': 'diverse'}\n"
        "raw['gender_clean'] = raw['gender'].str.strip().str.lower().map(gender_map)",
        show="raw['gender_clean'].value_counts(dropna=False)",
        wrong=[("raw['gender'].str.strip().str.lower()", "raw['gender'].lower()")],
    )
    dev.section("## Countries and income")
    dev.cell("raw['country'].value_counts()")
    dev.cell(
        "country_map = {'de': 'Germany', 'germany': 'Germany', 'fr': 'France', 'france': 'France',\n"
        "               'es': 'Spain', 'spain': 'Spain', 'it': 'Italy', 'italy': 'Italy',\n"
        "               'uk': 'United Kingdom', 'united kingdom': 'United Kingdom', 'pl': 'Poland', 'poland': 'Poland'}\n"
        "raw['country_clean'] = raw['country'].str.strip().str.lower().map(country_map)",
        show="raw['country_clean'].value_counts(dropna=False)",
        tweaks=[("'uk': 'United Kingdom',", "'uk': 'United Kingdom', 'u.k.': 'United Kingdom', 'españa': 'Spain',")],
    )
    dev.cell("raw['income'].sample(10, random_state=1).tolist()")
    dev.cell(
        "def parse_income(text):\n"
        "    if not isinstance(text, str) or not text.strip():\n"
        "        return np.nan\n"
        "    text = text.strip().replace('$', '').replace(',', '')\n"
        "    if text.endswith('k'):\n"
        "        return float(text[:-1]) * 1000\n"
        "    return float(text)\n\n"
        "parse_income('$52,000'), parse_income('48k'), parse_income('')",
        wrong=[("    if text.endswith('k'):\n        return float(text[:-1]) * 1000\n", "")],
    )
    dev.cell("raw['income_num'] = raw['income'].apply(parse_income)", show="raw['income_num'].describe().round(0)")
    dev.cell(
        "raw['signup'] = pd.to_datetime(raw['signup_date'], format='mixed', dayfirst=True)",
        show="raw['signup'].min(), raw['signup'].max()",
        wrong=[("raw['signup_date'], format='mixed', dayfirst=True)", "raw['signup_date'])")],
    )
    dev.cell("raw['satisfaction'].value_counts()")
    dev.cell(
        "raw['sat'] = pd.to_numeric(raw['satisfaction'].str.strip().replace({'five': '5', '4/5': '4'}), errors='coerce')\n"
        "raw.loc[~raw['sat'].between(1, 5), 'sat'] = np.nan",
        show="raw['sat'].value_counts(dropna=False).sort_index()",
    )
    dev.cell("raw['would_recommend'].str.lower().value_counts(dropna=False)", optional=0.3)
    dev.cell(
        "raw['recommend'] = raw['would_recommend'].str.lower().map({'yes': True, 'no': False})",
        show="raw['recommend'].value_counts(dropna=False)",
    )
    dev.section("## A clean table")
    dev.cell(
        "clean = raw[['respondent_id', 'age_num', 'gender_clean', 'country_clean', 'income_num', 'signup', 'sat', 'recommend']]"
        ".rename(columns={'age_num': 'age', 'gender_clean': 'gender', 'country_clean': 'country', 'income_num': 'income'})",
        show="clean.head()",
        wrong=[("'income_num', 'signup'", "'income_num', 'signup_at'")],
        check=["clean.shape", "print(f'{clean.shape[0]} rows, {clean.shape[1]} columns')", "raw.shape, clean.shape"],
    )
    dev.cell("clean.isna().mean().round(3)")
    dev.cell("clean.groupby('country')['income'].median().sort_values()")
    dev.cell(
        "clean['income'] = clean['income'].fillna(clean.groupby('country')['income'].transform('median'))",
        show="clean['income'].isna().sum()",
    )
    dev.cell("clean.groupby('gender', dropna=False)['sat'].agg(['mean', 'count']).round(2)")
    dev.cell(
        "pd.crosstab(clean['country'], clean['recommend'])",
        tweaks=[("clean['recommend'])", "clean['recommend'], margins=True)")],
    )
    dev.cell("clean['signup'].dt.to_period('Q').value_counts().sort_index()", optional=0.3)
    dev.cell(
        "assert clean['respondent_id'].is_unique\nassert clean['age'].dropna().between(16, 100).all()\nprint('checks passed')",
        wrong=[("clean['age'].dropna().between", "clean['age'].between")],
    )
    dev.cell(
        "clean['age_group'] = pd.cut(clean['age'], bins=[15, 30, 45, 60, 100], labels=['16-30', '31-45', '46-60', '60+'])",
        show="clean['age_group'].value_counts().sort_index()",
    )
    dev.cell(
        "clean.pivot_table(index='age_group', columns='country', values='sat', aggfunc='mean', observed=True).round(2)",
        wrong=[("values='sat'", "values='satisfaction'")],
    )
    dev.cell("clean.dtypes", optional=0.4)
    dev.cell(
        "import time\n\n"
        "def iso_code(country):\n"
        "    time.sleep(0.5)  # the country service is slow\n"
        "    return {'Germany': 'DE', 'France': 'FR', 'Spain': 'ES', 'Italy': 'IT', 'United Kingdom': 'GB', 'Poland': 'PL'}[country]\n\n"
        "codes = {}\nfor country in clean['country'].dropna().unique():\n    codes[country] = iso_code(country)\ncodes",
        long=("clean['country'].dropna().unique():", "clean['country'].dropna().unique()[:2]:"),
    )
    dev.cell("clean.describe().round(1)")
    dev.cell(
        "print(f\"{len(clean)} respondents, {clean['country'].nunique()} countries\")\n"
        "print(f\"income known for {clean['income'].notna().mean():.1%}\")\n"
        "clean['sat'].mean().round(2)"
    )
