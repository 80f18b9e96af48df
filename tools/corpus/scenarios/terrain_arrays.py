"""Numerical arrays and algorithms: a terrain grid and a road network (files/elevation.npy, files/routes.csv)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "terrain.ipynb"
FAMILY = "numerical arrays and algorithms"
TITLE = "terrain statistics, flood fill and shortest paths"
ALIASES = {
    "grid": ("grid", "terrain", "elev"),
    "routes": ("routes", "roads", "links"),
    "short": ("short", "shortest", "sp"),
}


def plan(dev: Developer) -> None:
    dev.imports(
        "import numpy as np",
        "import pandas as pd",
        "import matplotlib.pyplot as plt",
        then="plt.rcParams.update({'figure.figsize': (4.5, 3), 'figure.dpi': 60})\n"
        "grid = np.load('files/elevation.npy')\ngrid.shape, grid.dtype",
    )
    dev.cell("grid[:3, :6]")
    dev.cell("grid.min(), grid.max(), grid.mean().round(2)")
    dev.cell(
        "peak = np.unravel_index(grid.argmax(), grid.shape)",
        show="peak, grid[peak]",
        wrong=[("np.unravel_index(grid.argmax(), grid.shape)", "np.unravel_index(grid.argmax())")],
    )
    dev.cell(
        "above = grid > 300",
        show="above.sum(), above.mean().round(3)",
        check=["above.shape", "print(f'{above.shape[0]} rows, {above.shape[1]} columns')"],
    )
    dev.cell(
        "rows_mean = grid.mean(axis=1)", show="rows_mean.round(1)[:10]", check=["rows_mean.shape", "len(rows_mean)"]
    )
    dev.cell(
        "dy, dx = np.gradient(grid)\nslope = np.hypot(dx, dy)",
        show="slope.max().round(2), np.percentile(slope, 95).round(2)",
        check=["slope.shape", "print(f'{slope.shape[0]} rows, {slope.shape[1]} columns')"],
    )
    dev.cell("normalised = (grid - grid.min()) / (grid.max() - grid.min())", show="normalised[:2, :5].round(3)")
    dev.cell(
        "blocks = grid.reshape(8, 5, 12, 5).mean(axis=(1, 3))",
        show="blocks.shape, blocks.round(0)[:3]",
        wrong=[("grid.reshape(8, 5, 12, 5)", "grid.reshape(8, 5, 12)")],
    )
    dev.cell(
        "smooth = grid.copy()\n"
        "smooth[1:-1, 1:-1] = (grid[:-2, 1:-1] + grid[2:, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:] + grid[1:-1, 1:-1]) / 5",
        show="np.abs(smooth - grid).max().round(2)",
        wrong=[("grid[1:-1, 2:]", "grid[1:-1, 1:]")],
        check=["smooth.shape", "print(f'{smooth.shape[0]} rows, {smooth.shape[1]} columns')"],
    )
    dev.cell("# the lakes are flat: clip them\ngrid[grid < 125] = 125", show="(grid == 125).sum()", mutates=True)
    dev.cell("plt.imshow(grid, cmap='terrain')\nplt.colorbar(label='m')", plot=True)
    dev.section("## Hills as connected regions")
    dev.cell(
        "from collections import deque\n\n"
        "def region(mask, start):\n"
        "    seen = {start}\n    queue = deque([start])\n    while queue:\n        r, c = queue.popleft()\n"
        "        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):\n"
        "            if 0 <= nr < mask.shape[0] and 0 <= nc < mask.shape[1] and mask[nr, nc] and (nr, nc) not in seen:\n"
        "                seen.add((nr, nc))\n                queue.append((nr, nc))\n    return seen\n\n"
        "len(region(above, peak))",
        wrong=[("queue.popleft()", "queue.pop_left()")],
    )
    dev.cell(
        "labels = np.zeros(grid.shape, dtype=int)\ncount = 0\nfor r, c in zip(*np.nonzero(above)):\n"
        "    if labels[r, c] == 0:\n        count += 1\n        for cell in region(above, (r, c)):\n            labels[cell] = count\ncount",
        check=["count"],
    )
    dev.cell("np.bincount(labels.ravel())[1:]")
    dev.section("## Roads")
    dev.cell(
        "routes = pd.read_csv('files/routes.csv')",
        show="routes.head()",
        check=["routes.shape", "len(routes)", "print(f'{routes.shape[0]} rows, {routes.shape[1]} columns')"],
    )
    dev.cell(
        "towns = sorted(set(routes['from']) | set(routes['to']))",
        show="len(towns), towns[:4]",
        check=["towns", "len(towns)"],
    )
    dev.cell(
        "index = {t: i for i, t in enumerate(towns)}\ndist = np.full((len(towns), len(towns)), np.inf)\nnp.fill_diagonal(dist, 0)\n"
        "for a, b, km in routes.itertuples(index=False):\n    dist[index[a], index[b]] = dist[index[b], index[a]] = km",
        show="np.isfinite(dist).sum()",
        check=["dist.shape", "print(f'{dist.shape[0]} rows, {dist.shape[1]} columns')"],
    )
    dev.cell(
        "short = dist.copy()\nfor k in range(len(towns)):\n    short = np.minimum(short, short[:, [k]] + short[[k], :])",
        show="short.max().round(1)",
        wrong=[("short[:, [k]] + short[[k], :]", "short[:, k] + short[k, :]")],
        check=["short.shape", "print(f'{short.shape[0]} rows, {short.shape[1]} columns')", "short.shape, dist.shape"],
    )
    dev.cell("pd.DataFrame(short, index=towns, columns=towns).round(0).iloc[:5, :5]")
    dev.cell(
        "import heapq\n\n"
        "def dijkstra(source):\n    best = {source: 0.0}\n    heap = [(0.0, source)]\n    while heap:\n"
        "        d, town = heapq.heappop(heap)\n        if d > best[town]:\n            continue\n"
        "        for _, row in routes[(routes['from'] == town) | (routes['to'] == town)].iterrows():\n"
        "            other = row['to'] if row['from'] == town else row['from']\n            nd = d + row['km']\n"
        "            if nd < best.get(other, np.inf):\n                best[other] = nd\n                heapq.heappush(heap, (nd, other))\n"
        "    return best\n\n"
        "from_aldor = dijkstra('Aldor')\nsorted(from_aldor.items(), key=lambda kv: kv[1])[:4]"
    )
    dev.cell("all(abs(from_aldor[t] - short[index['Aldor'], index[t]]) < 1e-9 for t in from_aldor)")
    dev.cell(
        "eigvals = np.linalg.eigvalsh(np.where(np.isfinite(dist), dist, 0))",
        show="eigvals.round(2)[-3:]",
        check=["eigvals.shape"],
    )
    dev.cell(
        "A = np.vander(np.arange(5.0), 3)\nb = np.array([1.0, 2.9, 5.2, 7.1, 8.8])\ncoef, *_ = np.linalg.lstsq(A, b, rcond=None)",
        show="coef.round(4)",
    )
    dev.cell("profile = grid[peak[0]]", show="np.argsort(profile)[-5:]", check=["profile.shape"])
    dev.cell("(np.diff(np.sign(np.diff(profile))) < 0).sum()")
    dev.cell("np.histogram(grid, bins=5)", tweaks=[("bins=5", "bins=[100, 150, 200, 300, 600]")])
    dev.cell("np.round(np.corrcoef(grid[:, :-1].ravel(), grid[:, 1:].ravel())[0, 1], 4)", optional=0.3)
    dev.cell("plt.plot(profile)\nplt.title(f'Profile through row {peak[0]}')", plot=True)
    dev.cell(
        "print('hills above 300 m:', count)\nprint('largest hill (cells):', np.bincount(labels.ravel())[1:].max())\n"
        "grid.std().round(2)"
    )
