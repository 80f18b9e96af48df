"""An A/B-test analysis on simulated conversions, worked in two notebooks at once: a main analysis and a scratch notebook.

The log interleaves two kernels (two kernel_ids, so two trajectories): ideas
are tried in scratch.ipynb, then copied into the analysis. Errors: a scipy
call with a missing argument, a package that is not installed, a bootstrap
loop with a typo, a NameError from running a copied cell in the wrong
notebook; the analysis kernel is restarted and re-run at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_10"
NOTEBOOK = "ab_analysis.ipynb"
START = "2025-03-14T10:00:00+00:00"


def script(nb: Notebook) -> None:
    imports = nb.add("import numpy as np\nimport pandas as pd\nfrom scipy import stats")
    nb.run(imports)
    simulate = nb.add(
        "rng = np.random.default_rng(5)\n"
        "n = 4000\n"
        "ab = pd.DataFrame({'variant': rng.choice(['A', 'B'], n),\n"
        "                   'device': rng.choice(['mobile', 'desktop', 'tablet'], n, p=[0.6, 0.3, 0.1])})\n"
        "base = np.where(ab['device'] == 'desktop', 0.12, 0.08)\n"
        "lift = np.where(ab['variant'] == 'B', 0.015, 0.0)\n"
        "ab['converted'] = rng.random(n) < base + lift\n"
        "ab.head()"
    )
    nb.run(simulate)
    rates = nb.add("ab.groupby('variant')['converted'].agg(['mean', 'sum', 'size'])")
    nb.run(rates)

    scratch = nb.open("scratch.ipynb")
    s_imports = scratch.add("import numpy as np\nfrom scipy import stats")
    scratch.run(s_imports)
    s_try = scratch.add("table = np.array([[120, 880], [150, 850]])\nstats.chi2_contingency(table)")
    scratch.run(s_try)
    scratch.fix(s_try, "stats.chi2_contingency(table)", "res = stats.chi2_contingency(table)\nres.statistic, res.pvalue")
    scratch.run(s_try)
    s_ttest = scratch.add("stats.ttest_ind(table)")
    scratch.run(s_ttest)
    scratch.fix(s_ttest, "stats.ttest_ind(table)", "stats.ttest_ind(table[0], table[1])")
    scratch.run(s_ttest)
    scratch.delete(s_ttest)

    contingency = nb.add("table = pd.crosstab(ab['variant'], ab['converted'])\ntable")
    nb.run(contingency)
    chi2 = nb.add("res = stats.chi2_contingency(table)\nres.statistic, res.pvalue")
    nb.run(chi2)
    nb.fix(chi2, "res.statistic, res.pvalue", "print(f'chi2={res.statistic:.3f}  p={res.pvalue:.4f}')")
    nb.run(chi2)
    by_device = nb.add("ab.pivot_table(index='device', columns='variant', values='converted', aggfunc='mean').round(4)")
    nb.run(by_device)
    nb.save()

    s_boot = scratch.add(
        "rng = np.random.default_rng(0)\n"
        "a = rng.random(1000) < 0.10\n"
        "b = rng.random(1000) < 0.12\n"
        "diffs = [rng.choice(b, len(b)).mean() - rng.choice(a, len(a)).mean() for _ in range(500)]\n"
        "np.percentile(diff, [2.5, 97.5])"
    )
    scratch.run(s_boot)
    scratch.fix(s_boot, "np.percentile(diff,", "np.percentile(diffs,")
    scratch.run(s_boot)
    scratch.fix(s_boot, "np.percentile(diffs, [2.5, 97.5])", "np.percentile(diffs, [2.5, 97.5]).round(4)")
    scratch.run(s_boot)
    scratch.save()

    boot = nb.add(
        "conv = {v: ab.loc[ab['variant'] == v, 'converted'].to_numpy() for v in 'AB'}\n"
        "rng_boot = np.random.default_rng(0)\n"
        "diffs = np.array([rng_boot.choice(conv['B'], len(conv['B'])).mean() - rng_boot.choice(conv['A'], len(conv['A'])).mean()\n"
        "                  for _ in range(1000)])\n"
        "np.percentile(diffs, [2.5, 97.5]).round(4)"
    )
    nb.run(boot)
    observed = nb.add("conv['B'].mean() - conv['A'].mean()")
    nb.run(observed)
    pasted = scratch.add("conv['B'].mean() - conv['A'].mean()")
    scratch.run(pasted)
    scratch.delete(pasted)
    hist = nb.add(
        "import matplotlib.pyplot as plt\n"
        "plt.hist(diffs, bins=40)\n"
        "plt.axvline(0, color='black', lw=1)\n"
        "plt.title('bootstrap difference B - A')\nplt.show()"
    )
    nb.run(hist)
    power = nb.add(
        "from statsmodels.stats.power import NormalIndPower\n"
        "NormalIndPower().solve_power(effect_size=0.05, alpha=0.05, power=0.8)"
    )
    nb.run(power)
    nb.fix(
        power,
        "from statsmodels.stats.power import NormalIndPower\n"
        "NormalIndPower().solve_power(effect_size=0.05, alpha=0.05, power=0.8)",
        "p1, p2 = 0.09, 0.105\n"
        "z_a, z_b = stats.norm.ppf(0.975), stats.norm.ppf(0.8)\n"
        "n_per_arm = (z_a + z_b) ** 2 * (p1 * (1 - p1) + p2 * (1 - p2)) / (p2 - p1) ** 2\n"
        "int(np.ceil(n_per_arm))",
    )
    nb.run(power)
    segments = nb.add(
        "for device, part in ab.groupby('device'):\n"
        "    t = pd.crosstab(part['variant'], part['converted'])\n"
        "    p = stats.chi2_contingency(t).pvalue\n"
        "    print(f'{device:>8}: n={len(part):>5}  p={p:.3f}')"
    )
    nb.run(segments)
    nb.save()
    nb.restart()
    nb.run_all()
    scratch.run(s_try)
    scratch.save()
    nb.save()
