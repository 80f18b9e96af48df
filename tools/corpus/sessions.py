"""The corpus: who develops which notebook, and when.

Nine simulated developers (:data:`PERSONAS`), students and professionals as in
JuNE, each solve five of the fifteen scenarios in :mod:`tools.corpus.scenarios`; every
scenario is solved by three of them, who name their variables differently (the scenario's
``ALIASES``, one spelling per developer) and make different mistakes.
"""

from __future__ import annotations

import datetime as dt
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tools.corpus.developer import Developer, Persona

if TYPE_CHECKING:
    from tools.corpus.notebook import Notebook, SessionLog

SCENARIOS = (
    "sales_eda",
    "survey_cleaning",
    "orders_join",
    "housing_features",
    "churn_model",
    "weather_plots",
    "reviews_text",
    "sensor_timeseries",
    "terrain_arrays",
    "events_json",
    "payments_debugging",
    "flights_delays",
    "stock_returns",
    "access_log",
    "grades_reshape",
)
DEVELOPERS_PER_SCENARIO = 3
FIRST_DAY = dt.datetime(2025, 4, 7, 9, 0)
# The chance that a session opens a second notebook to try something in a clean kernel.
SCRATCH_NOTEBOOK_CHANCE = 0.1


def _persona(user: str, expert: bool, **habits: Any) -> Persona:
    return Persona(user=user, expert=expert, **habits)


PERSONAS = (
    _persona(
        "expert_1",
        True,
        slips=0.05,
        wrong=0.3,
        tweak=0.2,
        recheck=0.03,
        revisit=0.05,
        split=0.25,
        prints=0.1,
        scratch=0.15,
        checks=0.6,
        patience=0.2,
        restarts=1,
        after_restart=(0.4, 0.4, 0.2),
        head_rows=5,
        digits=2,
        forgets_imports=False,
        markdown=True,
        save_every=6,
        semicolon_plots=False,
    ),
    _persona(
        "student_1",
        False,
        slips=0.18,
        wrong=0.6,
        tweak=0.25,
        recheck=0.08,
        revisit=0.12,
        split=0.15,
        prints=0.35,
        scratch=0.25,
        checks=0.3,
        patience=0.1,
        restarts=0,
        after_restart=(0.15, 0.35, 0.5),
        head_rows=10,
        digits=3,
        forgets_imports=True,
        markdown=False,
        save_every=10,
        semicolon_plots=True,
    ),
    _persona(
        "expert_2",
        True,
        slips=0.1,
        wrong=0.35,
        tweak=0.3,
        recheck=0.05,
        revisit=0.08,
        split=0.1,
        prints=0.05,
        scratch=0.1,
        checks=0.5,
        patience=0.4,
        restarts=0,
        after_restart=(0.2, 0.5, 0.3),
        head_rows=3,
        digits=2,
        forgets_imports=False,
        markdown=False,
        save_every=8,
        semicolon_plots=True,
    ),
    _persona(
        "student_2",
        False,
        slips=0.14,
        wrong=0.5,
        tweak=0.15,
        recheck=0.1,
        revisit=0.1,
        split=0.2,
        prints=0.6,
        scratch=0.2,
        checks=0.4,
        patience=0.2,
        restarts=1,
        after_restart=(0.3, 0.3, 0.4),
        head_rows=5,
        digits=1,
        forgets_imports=True,
        markdown=True,
        save_every=5,
        semicolon_plots=False,
    ),
    _persona(
        "expert_3",
        True,
        slips=0.08,
        wrong=0.3,
        tweak=0.35,
        recheck=0.08,
        revisit=0.15,
        split=0.3,
        prints=0.15,
        scratch=0.3,
        checks=0.35,
        patience=0.3,
        restarts=1,
        after_restart=(0.35, 0.45, 0.2),
        head_rows=8,
        digits=3,
        forgets_imports=False,
        markdown=True,
        save_every=7,
        semicolon_plots=False,
    ),
    _persona(
        "student_3",
        False,
        slips=0.15,
        wrong=0.55,
        tweak=0.2,
        recheck=0.05,
        revisit=0.1,
        split=0.15,
        prints=0.25,
        scratch=0.15,
        checks=0.55,
        patience=0.15,
        restarts=1,
        after_restart=(0.25, 0.4, 0.35),
        head_rows=5,
        digits=2,
        forgets_imports=True,
        markdown=False,
        save_every=6,
        semicolon_plots=True,
    ),
    _persona(
        "expert_4",
        True,
        slips=0.06,
        wrong=0.25,
        tweak=0.15,
        recheck=0.03,
        revisit=0.06,
        split=0.15,
        prints=0.2,
        scratch=0.05,
        checks=0.4,
        patience=0.35,
        restarts=0,
        after_restart=(0.15, 0.6, 0.25),
        head_rows=4,
        digits=2,
        forgets_imports=False,
        markdown=False,
        save_every=12,
        semicolon_plots=False,
    ),
    _persona(
        "student_4",
        False,
        slips=0.12,
        wrong=0.45,
        tweak=0.25,
        recheck=0.06,
        revisit=0.2,
        split=0.2,
        prints=0.3,
        scratch=0.2,
        checks=0.5,
        patience=0.25,
        restarts=1,
        after_restart=(0.2, 0.35, 0.45),
        head_rows=6,
        digits=2,
        forgets_imports=True,
        markdown=True,
        save_every=9,
        semicolon_plots=True,
    ),
    _persona(
        "expert_5",
        True,
        slips=0.07,
        wrong=0.3,
        tweak=0.25,
        recheck=0.05,
        revisit=0.1,
        split=0.25,
        prints=0.1,
        scratch=0.25,
        checks=0.35,
        patience=0.35,
        restarts=0,
        after_restart=(0.4, 0.3, 0.3),
        head_rows=5,
        digits=3,
        forgets_imports=False,
        markdown=True,
        save_every=5,
        semicolon_plots=False,
    ),
)


class PlanCounter:
    """Stands in for a Developer to count a plan's cells before the session is played."""

    def __init__(self) -> None:
        self.cells = 0

    def cell(self, *args: Any, **kwargs: Any) -> None:
        self.cells += 1

    def imports(self, *args: Any, **kwargs: Any) -> None:
        self.cells += 1

    def section(self, title: str) -> None:
        """Markdown is not counted."""

    def pick(self, *options: str) -> str:
        return options[0]

    def chance(self, p: float) -> bool:
        return False


@dataclass(frozen=True)
class Session:
    """One developer solving one scenario, starting at ``start``."""

    name: str
    scenario: str
    persona: Persona
    slot: int  # which of the scenario's developers this is: picks the variable spellings
    start: str

    def module(self) -> ModuleType:
        return importlib.import_module(f"tools.corpus.scenarios.{self.scenario}")

    def play(self, log: SessionLog, notebook: type[Notebook]) -> None:
        """Play the scenario's plan with the persona's habits into ``log``."""
        scenario = self.module()
        counter = PlanCounter()
        scenario.plan(counter)
        dev = Developer(notebook(log, self.first_name()), self.persona, self.name, scenario.ALIASES, self.slot)
        dev.plan_length(counter.cells)
        scenario.plan(dev)
        # the first developer of a scenario with a scratch snippet always tries it; the others now and then
        if (dev.chance(SCRATCH_NOTEBOOK_CHANCE) or self.slot == 0) and getattr(scenario, "SCRATCH", None):
            scratch = dev.nb.open("scratch.ipynb")
            for code in scenario.SCRATCH:
                scratch.run(scratch.add(code))
            scratch.save()
        if dev.nb.notebook_name != scenario.NOTEBOOK:
            dev.nb.rename(scenario.NOTEBOOK)
        dev.finish()

    def first_name(self) -> str:
        """Some developers start from an untitled notebook and rename it at the end."""
        index = SCENARIOS.index(self.scenario) * DEVELOPERS_PER_SCENARIO + self.slot
        return "Untitled.ipynb" if index % 4 == 1 else self.module().NOTEBOOK


def _sessions() -> list[Session]:
    table = []
    for t, scenario in enumerate(SCENARIOS):
        for slot in range(DEVELOPERS_PER_SCENARIO):
            index = t * DEVELOPERS_PER_SCENARIO + slot
            # three groups of mixed experts and students, each on five scenarios
            persona = PERSONAS[(t + slot * DEVELOPERS_PER_SCENARIO) % len(PERSONAS)]
            start = FIRST_DAY + dt.timedelta(days=index // 3, hours=(index % 3) * 3, minutes=7 * (index % 5))
            kind, number = persona.user.split("_")
            name = f"s{index + 1:02d}_{scenario}_{kind[0]}{number}"  # e.g. s01_sales_eda_e1: expert 1
            table.append(Session(name, scenario, persona, slot, start.isoformat()))
    return table


SESSIONS = _sessions()
