"""Text processing: a web server access log parsed with regular expressions (files/access.log)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.corpus.developer import Developer

NOTEBOOK = "access_log.ipynb"
FAMILY = "text processing"
TITLE = "parse an access log and find slow and failing endpoints"
ALIASES = {
    "lines": ("lines", "raw_lines", "log_lines"),
    "logs": ("logs", "requests", "df"),
    "pattern": ("pattern", "LINE_RE", "rx"),
}


def plan(dev: Developer) -> None:
    dev.imports(
        "import re",
        "import pandas as pd",
        then="with open('files/access.log') as f:\n    lines = f.read().splitlines()\nlen(lines)",
    )
    dev.cell("lines[:3]")
    dev.cell(
        r"""pattern = re.compile(r'(?P<ip>\S+) - - \[(?P<time>[^\]]+)\] "(?P<method>\w+) (?P<path>\S+) HTTP/1\.1" (?P<status>\d{3}) (?P<size>\d+) (?P<latency>\d+)ms')""",
        show="pattern.match(lines[0]).groupdict()",
        wrong=[(r"(?P<status>\d{3})", r"(?P<status>\d{4})")],
    )
    dev.cell(
        "rows = [m.groupdict() for m in map(pattern.match, lines) if m]",
        show="len(rows), len(lines) - len(rows)",
        check=["len(rows)"],
    )
    dev.cell(
        "logs = pd.DataFrame(rows)",
        show="logs.head()",
        check=[
            "logs.shape",
            "print(f'{len(logs)} requests, {logs.shape[1]} fields')",
            "print(f'{logs.shape[0]} rows, {logs.shape[1]} columns')",
        ],
    )
    dev.cell(
        "logs[['status', 'size', 'latency']] = logs[['status', 'size', 'latency']].astype(int)",
        show="logs.dtypes",
        wrong=[("logs[['status', 'size', 'latency']].astype(int)", "logs['status', 'size', 'latency'].astype(int)")],
    )
    dev.cell(
        "logs['time'] = pd.to_datetime(logs['time'], format='%d/%b/%Y:%H:%M:%S %z')",
        show="logs['time'].min(), logs['time'].max()",
        wrong=[("format='%d/%b/%Y:%H:%M:%S %z'", "format='%d/%m/%Y:%H:%M:%S %z'")],
    )
    dev.cell("logs['status'].value_counts()")
    dev.cell(
        "logs.groupby('path')['latency'].agg(['mean', 'max', 'count']).round(1).sort_values('mean', ascending=False)"
    )
    dev.cell(
        "errors = logs[logs['status'] >= 500]",
        show="errors[['time', 'path', 'latency']].head()",
        check=["len(errors)", "len(errors) / len(logs)", "errors.shape, logs.shape"],
    )
    dev.cell(
        r"logs['endpoint'] = logs['path'].str.replace(r'\d+', ':id', regex=True).str.split('?').str[0]",
        show="logs['endpoint'].value_counts()",
    )
    dev.cell("logs.groupby('ip').size().nlargest(5)")
    dev.cell(
        "suspicious = logs[logs['path'] == '/admin'].groupby('ip').size()",
        show="suspicious.sort_values(ascending=False).head()",
        check=["suspicious", "len(suspicious)"],
    )
    dev.cell(
        "per_hour = logs.set_index('time').resample('h').size()",
        show="per_hour.describe().round(2)",
        check=["len(per_hour)"],
    )
    dev.cell("per_hour.idxmax(), per_hour.max()")
    dev.cell("logs['latency'].quantile([0.5, 0.9, 0.99])")
    dev.cell(
        "slow = logs[logs['latency'] > logs['latency'].quantile(0.95)]",
        show="slow['endpoint'].value_counts()",
        check=["slow.shape", "len(slow) / len(logs)", "print(f'{slow.shape[0]} rows, {slow.shape[1]} columns')"],
    )
    dev.cell(
        "logs['size_kb'] = (logs['size'] / 1024).round(1)",
        show="logs.groupby('endpoint')['size_kb'].sum().sort_values(ascending=False).head()",
    )
    dev.cell(
        r"queries = logs['path'].str.extract(r'\?q=(\w+)')[0].dropna()",
        show="queries.value_counts()",
        check=["len(queries)"],
    )
    dev.cell("status_class = (logs['status'] // 100).astype(str) + 'xx'", show="status_class.value_counts()")
    dev.cell("pd.crosstab(logs['endpoint'], status_class)")
    dev.cell(
        "def parse(line):\n    m = pattern.match(line)\n    if m is None:\n        raise ValueError(f'bad line: {line[:30]}')\n"
        "    return m['status']\n\nparse(lines[10])",
        broken=[("parse(lines[10])", "parse('garbage line here')")],
    )
    dev.cell(
        "from collections import Counter\nCounter(line.split('\"')[1].split()[0] for line in lines)",
        wrong=[("line.split('\"')[1]", "line.split('\"')[3]")],
    )
    dev.cell("logs['minute'] = logs['time'].dt.floor('min')", show="logs.groupby('minute').size().max()")
    dev.cell("logs.sort_values('time')['time'].diff().dt.total_seconds().describe().round(1)", optional=0.3)
    dev.cell(
        "top_paths = logs['path'].value_counts().head(3).index\nfor path in top_paths:\n"
        "    print(path, logs.loc[logs['path'] == path, 'latency'].median())"
    )
    dev.cell(
        "print(f\"{(logs['status'] == 404).mean():.2%} not found, {(logs['status'] >= 500).mean():.2%} server errors\")"
    )
    dev.cell(
        "import time\n\n"
        "def whois(ip):\n    time.sleep(0.3)  # one lookup per address\n    return 'internal' if ip.startswith('10.') else 'external'\n\n"
        "origins = {ip: whois(ip) for ip in logs['ip'].unique()[:10]}\nlen(origins)",
        long=("logs['ip'].unique()[:10]}", "logs['ip'].unique()[:3]}"),
    )
    dev.cell("logs.groupby('method')['latency'].median()", optional=0.3)
