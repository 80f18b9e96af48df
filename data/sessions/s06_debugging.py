"""A debugging session: a small feature-engineering script on generated patient data, broken in many ways and fixed one error at a time.

Failures met on the way: NameError, KeyError, TypeError, ValueError,
IndexError, AttributeError, shape mismatches, SyntaxError, ZeroDivisionError,
FileNotFoundError, ModuleNotFoundError, an AssertionError, a runaway loop
interrupted by hand (KeyboardInterrupt); two kernel restarts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_06"
NOTEBOOK = "debug_features.ipynb"
START = "2025-03-10T11:30:00+00:00"


def script(nb: Notebook) -> None:
    imports = nb.add("import numpy as np\nimport pandas as pd")
    nb.run(imports)
    data = nb.add(
        "rng = np.random.default_rng(2024)\n"
        "n = 200\n"
        "patients = pd.DataFrame({\n"
        "    'id': np.arange(n),\n"
        "    'age': rng.integers(18, 90, n),\n"
        "    'weight_kg': rng.normal(75, 12, n).round(1),\n"
        "    'height_cm': rng.normal(170, 9, n).round(1),\n"
        "    'group': rng.choice(['control', 'treated'], n),\n"
        "    'visits': rng.poisson(3, n),\n"
        "})\n"
        "patient.head()"
    )
    nb.run(data)
    nb.fix(data, "patient.head()", "patients.head()")
    nb.run(data)
    bmi = nb.add("patients['bmi'] = patients['weight'] / (patients['height_cm'] / 100) ** 2")
    nb.run(bmi)
    nb.fix(bmi, "patients['weight']", "patients['weight_kg']")
    nb.run(bmi)
    check = nb.add("patients['bmi'].describe().round(2)")
    nb.run(check)
    label = nb.add("patients['label'] = 'BMI ' + patients['bmi'].round(1)")
    nb.run(label)
    nb.fix(label, "patients['bmi'].round(1)", "patients['bmi'].round(1).astype(str)")
    nb.run(label)
    nb.save()
    per_visit = nb.add("patients['weight_per_visit'] = patients['weight_kg'] // patients['visits']\npatients['weight_per_visit'].max()")
    nb.run(per_visit)
    zero = nb.add("total = 0\nfor v in patients['visits']:\n    total += 1 / int(v)\ntotal")
    nb.run(zero)
    nb.fix(zero, "total += 1 / int(v)", "total += 1 / int(v) if v else 0")
    nb.run(zero)
    nb.fix(per_visit, "patients['weight_kg'] // patients['visits']", "patients['weight_kg'] / patients['visits'].replace(0, np.nan)")
    nb.run(per_visit)
    ages = nb.add("ages = patients['age'].to_numpy()\nbuckets = [ages[ages < 40], ages[(ages >= 40) & (ages < 65)], ages[ages >= 65]]\n[len(b) for b in buckets]")
    nb.run(ages)
    fourth = nb.add("buckets[3].mean()")
    nb.run(fourth)
    nb.fix(fourth, "buckets[3].mean()", "buckets[-1].mean()")
    nb.run(fourth)
    design = nb.add("X = patients[['age', 'bmi', 'visits']].to_numpy()\nw = np.array([0.5, -1.0])\nX @ w")
    nb.run(design)
    nb.fix(design, "np.array([0.5, -1.0])", "np.array([0.5, -1.0, 2.0])")
    nb.run(design)
    nb.fix(design, "X @ w", "(X @ w)[:5].round(2)")
    nb.run(design)
    stack = nb.add("np.hstack([X, patients['group']])")
    nb.run(stack)
    nb.fix(stack, "patients['group']", "(patients['group'] == 'treated').to_numpy()[:, None]")
    nb.run(stack)
    nb.fix(stack, "np.hstack(", "Xg = np.hstack(")
    nb.fix(stack, "[:, None]])", "[:, None]])\nXg.shape")
    nb.run(stack)
    group_mean = nb.add("patients.groupby('group').mean()")
    nb.run(group_mean)
    nb.fix(group_mean, ".mean()", ".mean(numeric_only=True).round(2)")
    nb.run(group_mean)
    syntax = nb.add("def normalise(col)\n    return (col - col.mean()) / col.std()")
    nb.run(syntax)
    nb.fix(syntax, "def normalise(col)", "def normalise(col):")
    nb.run(syntax)
    apply_norm = nb.add("patients[['age', 'bmi']].apply(normalise).head()")
    nb.run(apply_norm)
    attr = nb.add("groups = patients['group'].unique().tolist().sort()\nlen(groups)")
    nb.run(attr)
    nb.fix(attr, "patients['group'].unique().tolist().sort()", "sorted(patients['group'].unique())")
    nb.run(attr)
    counts = nb.add("ages.value_counts().head()")
    nb.run(counts)
    nb.fix(counts, "ages.value_counts()", "pd.Series(ages).value_counts()")
    nb.run(counts)
    nb.save()
    loop = nb.add(
        "import time\n"
        "# simulate a slow feature computation\n"
        "for i in range(40):\n"
        "    time.sleep(0.1)"
    )
    nb.run(loop, interrupt_after_s=1.0)
    nb.delete(loop)
    read = nb.add("extra = pd.read_csv('patients_extra.csv')")
    nb.run(read)
    # The extra table only exists as CSV text in the session (the replayed log
    # must not write files next to itself), so the fix reads it from memory.
    export = nb.add(
        "extra_csv = patients[['id', 'visits']].assign(site='north').to_csv(index=False)\nprint(extra_csv[:40])",
        after=data,
    )
    nb.run(export)
    nb.fix(read, "pd.read_csv('patients_extra.csv')", "pd.read_csv(io.StringIO(extra_csv))")
    nb.run(read)
    nb.fix(read, "extra = ", "import io\nextra = ")
    nb.run(read)
    merge = nb.add("merged = patients.merge(extra, on='id')\nmerged.columns.tolist()")
    nb.run(merge)
    nb.fix(merge, "on='id')", "on=['id', 'visits'])")
    nb.run(merge)
    test = nb.add("assert len(merged) == len(patients) + 1, 'rows lost in merge'")
    nb.run(test)
    nb.fix(test, "len(patients) + 1", "len(patients)")
    nb.run(test)
    scale = nb.add("from sklearn.preprocessing import StandardScalar\nStandardScalar().fit_transform(X)[:3]")
    nb.run(scale)
    nb.fix(scale, "StandardScalar\nStandardScalar()", "StandardScaler\nStandardScaler()")
    nb.run(scale)
    nb.fix(scale, "fit_transform(X)[:3]", "fit_transform(X)[:3].round(3)")
    nb.run(scale)
    missing_mod = nb.add("import seaborn_themes")
    nb.run(missing_mod)
    nb.delete(missing_mod)
    nb.save()
    nb.restart()
    nb.run_all()
    nb.restart()
    nb.run_all(nb.cells[:4])
    clip = nb.add("patients['bmi'].clip(lower='15')")
    nb.run(clip)
    nb.fix(clip, "lower='15'", "lower=15, upper=40")
    nb.run(clip)
    idx = nb.add("patients.loc[250, 'age']")
    nb.run(idx)
    nb.fix(idx, "patients.loc[250, 'age']", "patients.loc[patients['age'].idxmax(), ['id', 'age']]")
    nb.run(idx)
    nb.run_all()
    nb.save()
