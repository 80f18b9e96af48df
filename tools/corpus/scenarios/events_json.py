"""Nested JSON wrangling: an app's analytics export of users, sessions and events (files/events.json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "events_json.ipynb"
FAMILY = "nested JSON wrangling"
TITLE = "flatten an analytics export and build a funnel"
ALIASES = {
    "data": ("data", "export", "payload"),
    "users": ("users", "people", "accounts"),
    "events": ("events", "ev", "actions"),
}


def plan(dev: Developer) -> None:
    dev.imports(
        "import json",
        "import pandas as pd",
        then="with open('files/events.json') as f:\n    data = json.load(f)\ndata.keys()",
    )
    dev.cell("data['export']")
    dev.cell("users = data['users']", show="len(users), list(users[0].keys())", check=["len(users)"])
    dev.cell("users[0]['sessions'][0]['device']", peek=["len(users[0]['sessions'])"])
    dev.cell("users[0]['sessions'][0]['events'][:2]")
    dev.cell(
        "cities = [u.get('address', {}).get('city') for u in users]",
        show="cities[:10]",
        broken=[("u.get('address', {}).get('city')", "u['address']['city']")],
        check=["len(cities)", "cities[:5]"],
    )
    dev.cell(
        "flat = pd.json_normalize(users, sep='_')",
        show="flat.columns.tolist()",
        check=["flat.shape", "print(f'{flat.shape[0]} rows, {flat.shape[1]} columns')"],
    )
    dev.cell("flat[['user_id', 'plan', 'address_city']].head()")
    dev.cell("flat['plan'].value_counts()")
    dev.cell(
        "sessions = pd.json_normalize(users, record_path='sessions', meta=['user_id', 'plan'])",
        show="sessions.shape",
        wrong=[("record_path='sessions'", "record_path='session'")],
        check=[
            "sessions.shape",
            "print(f'{len(sessions)} sessions of {len(users)} users')",
            "print(f'{sessions.shape[0]} rows, {sessions.shape[1]} columns')",
            "sessions.shape, flat.shape",
        ],
    )
    dev.cell("sessions.head()")
    dev.cell("sessions['device.os'].value_counts()", wrong=[("['device.os']", "['device_os']")])
    dev.section("## Events")
    dev.cell(
        "events = pd.json_normalize(users, record_path=['sessions', 'events'], meta=['user_id', ['sessions', 'session_id']])",
        show="events.shape",
        check=[
            "events.shape",
            "len(events)",
            "print(f'{events.shape[0]} rows, {events.shape[1]} columns')",
            "events.shape, sessions.shape",
        ],
    )
    dev.cell("events['type'].value_counts()")
    dev.cell("events['ts'] = pd.to_datetime(events['ts'])", show="events['ts'].min(), events['ts'].max()")
    dev.cell("events.filter(like='props').notna().sum()")
    dev.cell(
        "checkouts = events[events['type'] == 'checkout']",
        show="checkouts[['user_id', 'props.total', 'props.coupon']].head()",
        check=["len(checkouts)", "len(checkouts) / len(events)"],
    )
    dev.cell("checkouts['props.total'].sum().round(2)")
    dev.cell("checkouts['props.coupon'].value_counts(dropna=False)", optional=0.3)
    dev.cell(
        "funnel = events.groupby('type')['user_id'].nunique().reindex(['open', 'search', 'view_item', 'add_to_cart', 'checkout'])",
        show="funnel",
    )
    dev.cell("(funnel / funnel['open']).round(3)")
    dev.cell(
        "per_session = events.groupby('sessions.session_id').agg(n=('type', 'size'), start=('ts', 'min'), end=('ts', 'max'))\n"
        "per_session['minutes'] = (per_session['end'] - per_session['start']).dt.total_seconds() / 60",
        show="per_session['minutes'].describe().round(1)",
        check=["per_session.shape", "print(f'{per_session.shape[0]} rows, {per_session.shape[1]} columns')"],
    )
    dev.cell(
        "def depth(obj):\n    if isinstance(obj, dict):\n        return 1 + max((depth(v) for v in obj.values()), default=0)\n"
        "    if isinstance(obj, list):\n        return 1 + max((depth(v) for v in obj), default=0)\n    return 0\n\n"
        "depth(data), depth(users[0])",
        wrong=[("obj.values()", "obj")],
    )
    dev.cell(
        "from collections import Counter\n\n"
        "def count_keys(obj, counter):\n    if isinstance(obj, dict):\n        for key, value in obj.items():\n"
        "            counter[key] += 1\n            count_keys(value, counter)\n    elif isinstance(obj, list):\n"
        "        for item in obj:\n            count_keys(item, counter)\n    return counter\n\n"
        "count_keys(data, Counter()).most_common(8)"
    )
    dev.cell(
        "searches = events.loc[events['type'] == 'search', 'props.query']",
        show="searches.value_counts()",
        check=["len(searches)"],
    )
    dev.cell("events.groupby('props.query')['props.results'].mean().round(1)")
    dev.cell(
        "for u in users:\n    u.setdefault('address', {'city': 'unknown', 'zip': None})",
        show="sum(u['address']['city'] == 'unknown' for u in users)",
        mutates=True,
    )
    dev.cell("pd.json_normalize(users)['address.city'].value_counts()")
    dev.cell(
        "import time\n\n"
        "def fetch_profile(user_id):\n    time.sleep(0.25)  # the profile service allows four calls a second\n"
        "    return {'user_id': user_id, 'tier': 'gold' if user_id % 7 == 0 else 'basic'}\n\n"
        "profiles = [fetch_profile(u['user_id']) for u in users]\nlen(profiles)",
        long=("for u in users]", "for u in users[:4]]"),
    )
    dev.cell("pd.DataFrame(profiles)['tier'].value_counts()")
    dev.cell("json.dumps(users[3]['sessions'][0]['device'])")
    dev.cell(
        "devices = sessions.groupby(['device.os', 'device.app_version']).size().unstack(fill_value=0)",
        show="devices",
    )
