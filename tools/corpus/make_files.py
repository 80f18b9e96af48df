"""Write the data files the bundled sessions load into data/files/, from seeded generators.

The notebooks of the corpus read these files by the relative path
``files/<name>``, so their contents reach a model only through outputs and the
runtime state, never through the code. Every file comes from its own
``numpy.random.default_rng`` seed, so a rerun writes the same bytes (with the
same numpy, pandas and pyarrow versions).

Usage: ``python -m tools.corpus.make_files [--out DIR]`` (from the repository root)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from tools.corpus import FILES_DIR

STORES = ["Northgate", "Riverside", "Old Town", "Harbour", "Hillcrest", "Airport"]
CITIES = ["Lisbon", "Oslo", "Vienna", "Dublin"]
COUNTRIES = ["Germany", "France", "Spain", "Italy", "United Kingdom", "Poland"]


def sales() -> pd.DataFrame:
    """Orders of a small retail chain in 2024 (exploration)."""
    rng = np.random.default_rng(101)
    catalogue = {
        "grocery": {"coffee beans": 11.5, "olive oil": 8.9, "pasta": 1.8, "green tea": 4.2, "honey": 6.4},
        "home": {"candle": 7.5, "towel": 12.0, "mug": 5.5, "vase": 24.0},
        "garden": {"seeds": 2.9, "gloves": 9.5, "watering can": 15.0},
        "toys": {"puzzle": 14.0, "kite": 19.5, "yo-yo": 3.5, "board game": 29.0},
        "books": {"cookbook": 22.0, "novel": 13.5, "atlas": 31.0},
    }
    products = [(c, p, price) for c, items in catalogue.items() for p, price in items.items()]
    n = 1400
    picks = rng.integers(0, len(products), n)
    store_weights = np.array([0.24, 0.2, 0.18, 0.14, 0.14, 0.1])
    days = pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 366, n), unit="D")
    units = rng.poisson(2.2, n) + 1
    price = np.array([products[i][2] for i in picks]) * rng.choice([1.0, 1.0, 1.0, 0.95, 1.05], n)
    rating = rng.choice([1, 2, 3, 4, 5], n, p=[0.05, 0.08, 0.2, 0.37, 0.3]).astype(float)
    rating[rng.random(n) < 0.22] = np.nan
    frame = pd.DataFrame(
        {
            "order_id": np.arange(50001, 50001 + n),
            "date": days.strftime("%Y-%m-%d"),
            "store": rng.choice(STORES, n, p=store_weights),
            "category": [products[i][0] for i in picks],
            "product": [products[i][1] for i in picks],
            "units": units,
            "unit_price": price.round(2),
            "discount": rng.choice([0.0, 0.0, 0.0, 0.05, 0.1, 0.2], n),
            "payment": rng.choice(["card", "cash", "voucher", "mobile"], n, p=[0.55, 0.2, 0.05, 0.2]),
            "rating": rating,
        }
    )
    return frame.sort_values(["date", "order_id"]).reset_index(drop=True)


def survey() -> pd.DataFrame:
    """A customer survey exported by hand: mixed spellings, units and missing markers (cleaning)."""
    rng = np.random.default_rng(202)
    n = 520
    age = rng.integers(18, 80, n).astype(object)
    for i in rng.choice(n, 40, replace=False):
        age[i] = rng.choice(
            ["n/a", "", "unknown", f"{rng.integers(18, 80)}.0", f" {rng.integers(18, 80)}", "-1", "230"]
        )
    country_spellings = {
        "Germany": ["Germany", "germany", "DE", "Germany "],
        "France": ["France", "france", "FR"],
        "Spain": ["Spain", "spain", "ES", "España"],
        "Italy": ["Italy", "IT", "italy"],
        "United Kingdom": ["United Kingdom", "UK", "U.K.", "uk"],
        "Poland": ["Poland", "PL", "poland "],
    }
    countries = rng.choice(COUNTRIES, n, p=[0.26, 0.2, 0.16, 0.14, 0.14, 0.1])
    country = [
        spell[0] if rng.random() < 0.7 else rng.choice(spell) for spell in (country_spellings[c] for c in countries)
    ]
    income_value = (rng.lognormal(10.6, 0.35, n) / 100).round() * 100
    income = []
    for value in income_value:
        style = rng.random()
        if style < 0.5:
            income.append(f"{value:.0f}")
        elif style < 0.7:
            income.append(f"${value:,.0f}")
        elif style < 0.85:
            income.append(f"{value:,.2f}")
        elif style < 0.93:
            income.append(f"{value / 1000:.0f}k")
        else:
            income.append("")
    signup = pd.Timestamp("2022-01-01") + pd.to_timedelta(rng.integers(0, 700, n), unit="D")
    date_styles = ["%Y-%m-%d", "%d/%m/%Y", "%Y/%m/%d"]
    signup_text = [d.strftime(date_styles[int(rng.choice(3, p=[0.7, 0.2, 0.1]))]) for d in signup]
    satisfaction = rng.choice(["1", "2", "3", "4", "5"], n, p=[0.07, 0.12, 0.25, 0.33, 0.23]).astype(object)
    for i in rng.choice(n, 18, replace=False):
        satisfaction[i] = rng.choice(["five", "4/5", "", "11", "3 "])
    gender = rng.choice(
        ["F", "M", "female", "male", "Female", " m", "", "diverse"],
        n,
        p=[0.3, 0.28, 0.12, 0.12, 0.06, 0.04, 0.05, 0.03],
    )
    frame = pd.DataFrame(
        {
            "respondent_id": np.arange(9001, 9001 + n),
            "age": age,
            "gender": gender,
            "country": country,
            "income": income,
            "signup_date": signup_text,
            "satisfaction": satisfaction,
            "would_recommend": rng.choice(
                ["yes", "no", "Yes", "YES", "maybe", ""], n, p=[0.45, 0.2, 0.1, 0.05, 0.15, 0.05]
            ),
        }
    )
    duplicates = frame.iloc[rng.choice(n, 14, replace=False)]
    return pd.concat([frame, duplicates]).sample(frac=1, random_state=7).reset_index(drop=True)


def customers() -> pd.DataFrame:
    """Customers of an online shop (joins)."""
    rng = np.random.default_rng(303)
    n = 240
    first = [
        "Ana",
        "Ben",
        "Chloe",
        "Dmitri",
        "Eva",
        "Farid",
        "Greta",
        "Hugo",
        "Ines",
        "Jonas",
        "Kira",
        "Luca",
        "Mona",
        "Nils",
        "Olga",
        "Pavel",
    ]
    last = ["Silva", "Berg", "Novak", "Klein", "Rossi", "Dubois", "Meyer", "Costa", "Haas", "Lind", "Moreau", "Falk"]
    return pd.DataFrame(
        {
            "customer_id": [f"C{i:04d}" for i in range(1, n + 1)],
            "name": [f"{rng.choice(first)} {rng.choice(last)}" for _ in range(n)],
            "city": rng.choice(
                ["Berlin", "Hamburg", "Munich", "Cologne", "Leipzig"], n, p=[0.3, 0.22, 0.2, 0.16, 0.12]
            ),
            "segment": rng.choice(["consumer", "business", "student"], n, p=[0.6, 0.25, 0.15]),
            "joined": (pd.Timestamp("2021-06-01") + pd.to_timedelta(rng.integers(0, 900, n), unit="D")).strftime(
                "%Y-%m-%d"
            ),
        }
    )


def products() -> pd.DataFrame:
    """The shop's catalogue; one SKU is listed twice (joins)."""
    rng = np.random.default_rng(304)
    names = {
        "audio": ["headphones", "speaker", "earbuds", "microphone"],
        "computing": ["keyboard", "mouse", "monitor", "webcam", "usb hub", "laptop stand"],
        "phone": ["charger", "phone case", "power bank", "screen protector"],
        "office": ["desk lamp", "notebook", "pen set", "stapler"],
    }
    rows: list[dict[str, object]] = []
    for category, items in names.items():
        for item in items:
            rows.append(
                {
                    "sku": f"SKU-{len(rows) + 101}",
                    "product": item,
                    "category": category,
                    "price": float(rng.choice([9.99, 14.5, 19.99, 24.9, 39.0, 59.0, 89.9, 129.0, 199.0])),
                }
            )
    frame = pd.DataFrame(rows)
    repeated = frame.iloc[[5]].assign(price=frame.iloc[5]["price"] + 10)
    return pd.concat([frame, repeated]).reset_index(drop=True)


def orders() -> pd.DataFrame:
    """Order lines; a few reference customers missing from customers.csv (joins)."""
    rng = np.random.default_rng(305)
    n = 1100
    customer = [f"C{i:04d}" for i in rng.integers(1, 241, n)]
    for i in rng.choice(n, 9, replace=False):
        customer[i] = f"C{rng.integers(300, 400):04d}"
    return pd.DataFrame(
        {
            "order_id": np.arange(70001, 70001 + n),
            "customer_id": customer,
            "sku": [f"SKU-{i}" for i in rng.integers(101, 119, n)],
            "qty": rng.choice([1, 1, 1, 2, 2, 3, 4], n),
            "date": (pd.Timestamp("2024-01-01") + pd.to_timedelta(np.sort(rng.integers(0, 182, n)), unit="D")).strftime(
                "%Y-%m-%d"
            ),
            "channel": rng.choice(["web", "app", "phone"], n, p=[0.55, 0.35, 0.1]),
        }
    )


def housing() -> pd.DataFrame:
    """Apartment sales with a price that depends on the features (feature engineering)."""
    rng = np.random.default_rng(404)
    n = 1000
    hoods = {
        "Centrum": 6200,
        "Westpark": 4300,
        "Lakeside": 5100,
        "Oldmill": 3600,
        "Northfield": 2900,
        "Harbourview": 5600,
        "Eastgate": 3200,
        "Greenhill": 4700,
    }
    hood = rng.choice(list(hoods), n)
    area = rng.gamma(6, 12, n).round(1) + 20
    rooms = np.clip((area / 28 + rng.normal(0, 0.7, n)).round(), 1, 7).astype(int)
    year = rng.integers(1905, 2024, n)
    label = np.where(
        year > 2010, "A", np.where(year > 1990, rng.choice(["B", "C"], n), rng.choice(["C", "D", "E", "F", "G"], n))
    )
    garden = rng.random(n) < 0.25
    floor = rng.integers(0, 12, n)
    base = np.array([hoods[h] for h in hood]) * area
    price = base * (1 + 0.08 * garden) * (1 - (2024 - year) / 500) * rng.lognormal(0, 0.12, n)
    sale = pd.Timestamp("2022-01-01") + pd.to_timedelta(rng.integers(0, 1000, n), unit="D")
    bathrooms = np.where(rooms >= 4, rng.choice([1, 2, 2, 3], n), 1).astype(float)
    bathrooms[rng.random(n) < 0.04] = np.nan
    return pd.DataFrame(
        {
            "listing_id": np.arange(3001, 3001 + n),
            "neighbourhood": hood,
            "area_m2": area,
            "rooms": rooms,
            "bathrooms": bathrooms,
            "floor": floor,
            "year_built": year,
            "energy_label": label,
            "has_garden": garden,
            "sale_date": sale,
            "price": (price / 1000).round() * 1000,
        }
    )


def churn() -> pd.DataFrame:
    """Telecom customers with a churn flag driven by contract, fees and support calls (modelling)."""
    rng = np.random.default_rng(505)
    n = 1800
    contract = rng.choice(["monthly", "annual", "two-year"], n, p=[0.5, 0.3, 0.2])
    tenure = np.where(contract == "monthly", rng.integers(1, 40, n), rng.integers(6, 72, n))
    fee = (rng.normal(48, 14, n) + (contract == "monthly") * 6).round(2).clip(15, 120)
    calls = rng.poisson(1.4, n) + (rng.random(n) < 0.1) * rng.integers(2, 6, n)
    data_gb = rng.gamma(2.2, 5.5, n).round(1)
    logit = (
        -1.6
        + 1.5 * (contract == "monthly")
        - 0.9 * (contract == "two-year")
        + 0.45 * calls
        - 0.035 * tenure
        + 0.018 * (fee - 48)
    )
    churned = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    age = rng.integers(18, 85, n).astype(float)
    age[rng.random(n) < 0.03] = np.nan
    return pd.DataFrame(
        {
            "customer_id": [f"T{i:05d}" for i in range(10001, 10001 + n)],
            "age": age,
            "contract": contract,
            "tenure_months": tenure,
            "monthly_fee": fee,
            "support_calls": calls,
            "data_gb": data_gb,
            "payment": rng.choice(["direct debit", "card", "invoice"], n, p=[0.5, 0.35, 0.15]),
            "churned": churned,
        }
    )


def weather() -> pd.DataFrame:
    """Daily weather of four cities in 2023 (visualisation)."""
    rng = np.random.default_rng(606)
    days = pd.date_range("2023-01-01", "2023-12-31", freq="D")
    frames = []
    climate = {
        "Lisbon": (17.5, 5.5, 2.2),
        "Oslo": (6.5, 10.5, 2.6),
        "Vienna": (11.5, 10.0, 1.9),
        "Dublin": (10.0, 5.0, 2.8),
    }
    for city, (mean, swing, rain) in climate.items():
        season = np.sin((days.day_of_year - 110) / 365 * 2 * np.pi)
        t_mean = mean + swing * season + rng.normal(0, 2.2, len(days))
        spread = rng.uniform(4, 10, len(days))
        wet = rng.random(len(days)) < 0.35 + 0.1 * (city in ("Dublin", "Oslo"))
        frames.append(
            pd.DataFrame(
                {
                    "date": days,
                    "city": city,
                    "t_min": (t_mean - spread / 2).round(1),
                    "t_max": (t_mean + spread / 2).round(1),
                    "precip_mm": np.where(wet, rng.gamma(1.3, rain * 2.5, len(days)), 0.0).round(1),
                    "wind_kmh": rng.gamma(3, 5 + 2 * (city == "Dublin"), len(days)).round(1),
                    "humidity": rng.integers(45, 99, len(days)),
                }
            )
        )
    return pd.concat(frames).reset_index(drop=True)


def reviews() -> list[dict[str, object]]:
    """Product reviews as a JSON list of records (text processing)."""
    rng = np.random.default_rng(707)
    products_ = ["kettle", "blender", "toaster", "air fryer", "coffee grinder"]
    good = [
        "works great",
        "really quiet",
        "easy to clean",
        "fast delivery",
        "solid build",
        "love the design",
        "good value for money",
        "heats up quickly",
    ]
    bad = [
        "stopped working",
        "too loud",
        "hard to clean",
        "arrived broken",
        "cheap plastic",
        "smells of burning",
        "lid does not close",
        "overpriced",
    ]
    neutral = ["does the job", "as described", "average", "bought it for my parents", "second one I own"]
    records = []
    for i in range(620):
        rating = int(rng.choice([1, 2, 3, 4, 5], p=[0.1, 0.1, 0.15, 0.3, 0.35]))
        pool = good if rating >= 4 else bad if rating <= 2 else neutral + good[:2] + bad[:2]
        phrases = list(rng.choice(pool, int(rng.integers(1, 4)), replace=False))
        if rng.random() < 0.3:
            phrases.append(str(rng.choice(neutral)))
        text = ". ".join(p.capitalize() if j == 0 else p for j, p in enumerate(phrases)) + rng.choice(
            [".", "!", "!!", "", " :)"]
        )
        if rng.random() < 0.08:
            text = text.upper()
        records.append(
            {
                "review_id": f"R{i + 1:04d}",
                "product": str(rng.choice(products_)),
                "rating": rating,
                "title": str(phrases[0]).title(),
                "text": text,
                "date": str((pd.Timestamp("2024-02-01") + pd.Timedelta(days=int(rng.integers(0, 200)))).date()),
                "helpful_votes": int(rng.poisson(2)),
                "verified": bool(rng.random() < 0.8),
            }
        )
    return records


def sensors() -> pd.DataFrame:
    """Ten-minute readings of three room sensors, with gaps and spikes (time series)."""
    rng = np.random.default_rng(808)
    stamps = pd.date_range("2024-03-01", periods=6 * 24 * 8, freq="10min")
    frames = []
    for sensor, base in (("lab", 21.0), ("office", 22.5), ("storage", 17.0)):
        hours = stamps.hour + stamps.minute / 60
        temperature = (
            base + 1.8 * np.sin((hours - 9) / 24 * 2 * np.pi) + rng.normal(0, 0.25, len(stamps)).cumsum() * 0.05
        )
        humidity = 45 + 8 * np.cos(hours / 24 * 2 * np.pi) + rng.normal(0, 1.5, len(stamps))
        frame = pd.DataFrame(
            {"timestamp": stamps, "sensor": sensor, "temperature": temperature.round(2), "humidity": humidity.round(1)}
        )
        spikes = rng.choice(len(frame), 4, replace=False)
        frame.loc[spikes, "temperature"] = 85.0
        gap = int(rng.integers(100, 900))
        frames.append(frame.drop(index=range(gap, gap + int(rng.integers(6, 30)))))
    frame = pd.concat(frames)
    frame["timestamp"] = frame["timestamp"].dt.strftime("%Y-%m-%d %H:%M")
    return frame.sample(frac=1, random_state=3).reset_index(drop=True)


def elevation() -> np.ndarray:
    """A smooth 40 x 60 terrain grid in metres (numerical arrays)."""
    rng = np.random.default_rng(909)
    y, x = np.mgrid[0:40, 0:60]
    hills = sum(
        h * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * s**2))
        for h, cx, cy, s in zip(
            rng.uniform(80, 400, 6), rng.uniform(0, 60, 6), rng.uniform(0, 40, 6), rng.uniform(4, 12, 6)
        )
    )
    return (120 + hills + rng.normal(0, 3, (40, 60))).round(1)


def routes() -> pd.DataFrame:
    """Road links between towns with distances in km (algorithms)."""
    rng = np.random.default_rng(910)
    towns = [
        "Aldor",
        "Brisk",
        "Calden",
        "Dunmore",
        "Elmstead",
        "Farrow",
        "Glenby",
        "Hollis",
        "Ivybridge",
        "Jarrow",
        "Kelso",
    ]
    position = {t: rng.uniform(0, 100, 2) for t in towns}
    links = set()
    for town in towns:
        distances = sorted(towns, key=lambda other: float(np.linalg.norm(position[town] - position[other])))
        for other in distances[1:4]:
            links.add(tuple(sorted((town, other))))
    rows = [
        {"from": a, "to": b, "km": round(float(np.linalg.norm(position[a] - position[b])) * 1.2, 1)}
        for a, b in sorted(links)
    ]
    return pd.DataFrame(rows)


def events() -> dict[str, object]:
    """An app's analytics export: users with nested sessions and events (nested JSON)."""
    rng = np.random.default_rng(1001)
    plans = ["free", "pro", "team"]
    devices = [("ios", "phone"), ("android", "phone"), ("web", "desktop"), ("ipados", "tablet")]
    kinds = ["open", "search", "view_item", "add_to_cart", "checkout", "share"]
    users = []
    for u in range(48):
        sessions_ = []
        start = pd.Timestamp("2024-05-01 08:00") + pd.Timedelta(minutes=int(rng.integers(0, 60 * 24 * 10)))
        for s in range(int(rng.integers(1, 5))):
            os_, form = devices[int(rng.integers(0, len(devices)))]
            clock = start + pd.Timedelta(hours=int(rng.integers(2, 60)) * s)
            evs = []
            for e in range(int(rng.integers(2, 8))):
                kind = kinds[min(int(rng.exponential(1.6)), len(kinds) - 1)] if e else "open"
                props: dict[str, object] = {}
                if kind == "search":
                    props = {
                        "query": str(rng.choice(["shoes", "rain jacket", "tent", "socks", "headlamp"])),
                        "results": int(rng.integers(0, 60)),
                    }
                elif kind in ("view_item", "add_to_cart"):
                    props = {
                        "item_id": int(rng.integers(100, 140)),
                        "price": float(rng.choice([9.5, 24.0, 59.9, 119.0])),
                    }
                elif kind == "checkout":
                    props = {
                        "items": int(rng.integers(1, 5)),
                        "total": round(float(rng.uniform(10, 300)), 2),
                        "coupon": None if rng.random() < 0.7 else "SPRING10",
                    }
                clock += pd.Timedelta(seconds=int(rng.integers(5, 400)))
                evs.append({"type": kind, "ts": clock.isoformat(), "props": props})
            sessions_.append(
                {
                    "session_id": f"s{u:02d}{s}",
                    "device": {"os": os_, "form": form, "app_version": str(rng.choice(["3.2.0", "3.2.1", "3.3.0"]))},
                    "events": evs,
                }
            )
        user: dict[str, object] = {
            "user_id": 1000 + u,
            "name": f"user{1000 + u}",
            "plan": str(rng.choice(plans, p=[0.6, 0.3, 0.1])),
            "address": {
                "city": str(rng.choice(["Madrid", "Porto", "Lyon", "Turin"])),
                "zip": f"{rng.integers(10000, 99999)}",
            },
            "sessions": sessions_,
        }
        if rng.random() < 0.15:
            del user["address"]
        users.append(user)
    return {"export": {"app": "trailshop", "generated": "2024-05-12T00:00:00", "version": 2}, "users": users}


def transactions() -> pd.DataFrame:
    """Card transactions in several currencies, amounts as text with a decimal comma in some rows (debugging)."""
    rng = np.random.default_rng(1101)
    n = 700
    amounts = rng.lognormal(3.4, 0.9, n).round(2)
    currency = rng.choice(["EUR", "USD", "GBP", "CHF", "SEK"], n, p=[0.5, 0.2, 0.15, 0.08, 0.07])
    text = [
        f"{a:.2f}".replace(".", ",") if c in ("EUR", "SEK") and rng.random() < 0.4 else f"{a:.2f}"
        for a, c in zip(amounts, currency)
    ]
    merchants = ["Café Nord", "BookBarn", "RailPass", "FreshMart", "CloudHost", "Pharma+", "CinemaX", "TaxiGo"]
    return pd.DataFrame(
        {
            "tx_id": np.arange(1, n + 1),
            "timestamp": (
                pd.Timestamp("2024-04-01") + pd.to_timedelta(np.sort(rng.integers(0, 30 * 24 * 3600, n)), unit="s")
            ).strftime("%Y-%m-%d %H:%M:%S"),
            "merchant": rng.choice(merchants, n),
            "amount": text,
            "currency": currency,
            "status": rng.choice(["ok", "ok", "ok", "ok", "refunded", "declined"], n),
        }
    )


FX_RATES = {"base": "EUR", "date": "2024-04-30", "rates": {"USD": 1.0712, "GBP": 0.8563, "CHF": 0.9784, "SEK": 11.6235}}


def flights() -> pd.DataFrame:
    """Departures of a regional airport network in one quarter (exploration)."""
    rng = np.random.default_rng(1201)
    n = 2600
    carriers = ["NA", "SK", "LX", "OS", "EW"]
    airports = ["VIE", "ZRH", "CPH", "OSL", "ARN", "HEL"]
    origin = rng.choice(airports, n)
    dest = np.array([rng.choice([a for a in airports if a != o]) for o in origin])
    carrier = rng.choice(carriers, n, p=[0.28, 0.24, 0.18, 0.18, 0.12])
    hour = rng.choice(np.arange(6, 23), n)
    delay = rng.gamma(1.1, 9, n) - 6 + (hour > 17) * rng.gamma(1.5, 6, n) + (carrier == "EW") * 7
    cancelled = rng.random(n) < 0.025
    return pd.DataFrame(
        {
            "flight_date": (pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 91, n), unit="D")).strftime(
                "%Y-%m-%d"
            ),
            "carrier": carrier,
            "flight_no": [f"{c}{rng.integers(100, 999)}" for c in carrier],
            "origin": origin,
            "dest": dest,
            "sched_dep": [f"{h:02d}:{m:02d}" for h, m in zip(hour, rng.choice([0, 15, 30, 45], n))],
            "dep_delay": np.where(cancelled, np.nan, delay.round()),
            "distance_km": rng.integers(300, 1800, n),
            "cancelled": cancelled,
        }
    )


def prices() -> pd.DataFrame:
    """Daily closing prices of five fictional stocks, one column each (time series)."""
    rng = np.random.default_rng(1301)
    days = pd.bdate_range("2023-01-02", "2024-06-28")
    tickers = {
        "ORBX": (0.0006, 0.018),
        "KELP": (0.0002, 0.011),
        "VANT": (0.0009, 0.026),
        "MIRA": (-0.0001, 0.014),
        "QUIL": (0.0004, 0.02),
    }
    frame = pd.DataFrame({"date": days.strftime("%Y-%m-%d")})
    market = rng.normal(0, 0.008, len(days))
    for ticker, (drift, vol) in tickers.items():
        returns = drift + 0.7 * market + rng.normal(0, vol, len(days))
        frame[ticker] = (rng.uniform(20, 200) * np.exp(np.cumsum(returns))).round(2)
    frame.loc[rng.choice(len(frame), 6, replace=False), "VANT"] = np.nan
    return frame


def access_log() -> str:
    """A web server access log, one request per line (text processing)."""
    rng = np.random.default_rng(1401)
    paths = [
        "/",
        "/login",
        "/api/items",
        "/api/items/42",
        "/api/cart",
        "/static/app.js",
        "/static/logo.png",
        "/search?q=tent",
        "/checkout",
        "/admin",
    ]
    clock = pd.Timestamp("2024-06-03 00:00:00")
    lines = []
    for _ in range(1500):
        clock += pd.Timedelta(seconds=int(rng.exponential(55)))
        path = str(rng.choice(paths, p=[0.12, 0.08, 0.2, 0.1, 0.1, 0.12, 0.1, 0.08, 0.05, 0.05]))
        status = (
            int(rng.choice([200, 200, 200, 200, 304, 404, 500, 401]))
            if path != "/admin"
            else int(rng.choice([401, 403]))
        )
        method = "POST" if path in ("/login", "/api/cart", "/checkout") and rng.random() < 0.7 else "GET"
        ip = f"10.0.{rng.integers(0, 4)}.{rng.integers(2, 60)}"
        latency = int(rng.gamma(2, 40)) + (path == "/checkout") * 300 + (status == 500) * 900
        size = int(rng.integers(200, 40000)) if status == 200 else 0
        lines.append(
            f'{ip} - - [{clock.strftime("%d/%b/%Y:%H:%M:%S")} +0000] "{method} {path} HTTP/1.1" {status} {size} {latency}ms'
        )
    return "\n".join(lines) + "\n"


def grades() -> pd.DataFrame:
    """Term grades of a school year, one wide row per student (reshaping)."""
    rng = np.random.default_rng(1501)
    n = 180
    frame = pd.DataFrame(
        {
            "student": [f"S{i:03d}" for i in range(1, n + 1)],
            "class": rng.choice(["7a", "7b", "8a", "8b"], n),
        }
    )
    ability = rng.normal(0, 1, n)
    for subject in ("math", "physics", "history", "english"):
        for term in (1, 2, 3):
            score = 68 + 10 * ability + rng.normal(0, 8, n) + term * (subject == "math") * 2
            column = score.clip(0, 100).round()
            column[rng.random(n) < 0.03] = np.nan
            frame[f"{subject}_t{term}"] = column
    return frame


def write_all(out: Path) -> list[Path]:
    """Write every file into ``out`` and return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, Callable[[], pd.DataFrame]] = {
        "sales.csv": sales,
        "survey.csv": survey,
        "customers.csv": customers,
        "orders.csv": orders,
        "churn.csv": churn,
        "sensors.csv": sensors,
        "transactions.csv": transactions,
        "prices.csv": prices,
        "grades.csv": grades,
        "routes.csv": routes,
    }
    parquet: dict[str, Callable[[], pd.DataFrame]] = {
        "products.parquet": products,
        "housing.parquet": housing,
        "weather.parquet": weather,
        "flights.parquet": flights,
    }
    written = []
    for name, make in tables.items():
        make().to_csv(out / name, index=False, lineterminator="\n")
        written.append(out / name)
    for name, make in parquet.items():
        # no pandas index column and fixed compression keep the bytes stable
        make().to_parquet(out / name, index=False, compression="snappy")
        written.append(out / name)
    for name, payload, indent in (
        ("reviews.json", reviews(), 1),
        ("events.json", events(), 2),
        ("fx_rates.json", FX_RATES, 2),
    ):
        (out / name).write_text(json.dumps(payload, indent=indent, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(out / name)
    np.save(out / "elevation.npy", elevation())
    written.append(out / "elevation.npy")
    (out / "access.log").write_text(access_log(), encoding="utf-8")
    written.append(out / "access.log")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FILES_DIR, help="directory for the files (default: data/files)")
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        print(f"{path.name}: {path.stat().st_size} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
