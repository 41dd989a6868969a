#!/usr/bin/env python3
"""Writes a synthetic Autobuild local store (L2 shape: docs/autobuild-stores.md
section 1) of a given age, for timing `abstore import --from autobuild-local`
(docs/benchmarks.md, "Importing Autobuild's local store").

    python3 bench/scripts/autobuild-local-store.py DIR [--age month]

The ages have the counts of abstore-load's replay ages (bench/src/autobuild):
day 17,000 journal events and 30 builds, week 120,000 and 200, month 500,000
and 1,000; every build has 100 events, two plan revisions, implement notes and
three session transcripts (text blobs of 8 to 64 KiB). Event texts are compact
JSON as JavaScript's JSON.stringify writes them. Nothing of Autobuild is used.
"""

import argparse
import hashlib
import json
import os
import random
import sqlite3

AGES = {"day": (17_000, 30), "week": (120_000, 200), "month": (500_000, 1_000)}
REPO = "/home/me/widgets"
EPOCH_MS = 1_780_000_000_000


def iso(ms):
    import datetime

    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def js(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--age", default="month", choices=sorted(AGES))
    args = parser.parse_args()
    journal, builds = AGES[args.age]
    rng = random.Random(0x5EED)
    os.makedirs(os.path.join(args.dir, "blobs"), exist_ok=True)
    db = sqlite3.connect(os.path.join(args.dir, "autobuild.sqlite"))
    db.execute("PRAGMA journal_mode = WAL")
    lease = "lease_holder TEXT, lease_expires_at TEXT, lease_ttl_ms INTEGER, heartbeat_at TEXT"
    db.executescript(
        f"""
        CREATE TABLE builds (slug TEXT PRIMARY KEY NOT NULL, repo TEXT NOT NULL, ticket TEXT, branch TEXT,
          created_at TEXT NOT NULL, updated_at TEXT NOT NULL, {lease});
        CREATE TABLE events (build TEXT NOT NULL, seq INTEGER NOT NULL, ts TEXT NOT NULL, actor TEXT NOT NULL,
          type TEXT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (build, seq));
        CREATE TABLE artifacts (build TEXT NOT NULL, kind TEXT NOT NULL, revision INTEGER NOT NULL,
          blob_ref TEXT NOT NULL, metadata TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (build, kind, revision));
        CREATE TABLE repo_streams (repo TEXT PRIMARY KEY NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, {lease});
        CREATE TABLE repo_events (repo TEXT NOT NULL, seq INTEGER NOT NULL, ts TEXT NOT NULL, actor TEXT NOT NULL,
          type TEXT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (repo, seq));
        CREATE TABLE repo_artifacts (repo TEXT NOT NULL, kind TEXT NOT NULL, revision INTEGER NOT NULL,
          blob_ref TEXT NOT NULL, metadata TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (repo, kind, revision));
        """
    )
    words = "the a build plan verify review commit branch ticket runner agent store event journal".split()

    def text(n):
        return " ".join(rng.choice(words) for _ in range(n))

    def blob(content):
        data = content.encode()
        sha = hashlib.sha256(data).hexdigest()
        shard = os.path.join(args.dir, "blobs", sha[:2])
        os.makedirs(shard, exist_ok=True)
        with open(os.path.join(shard, sha), "wb") as f:
            f.write(data)
        return sha, len(data)

    span = 30 * 86_400_000
    start = EPOCH_MS
    db.execute(
        "INSERT INTO repo_streams VALUES (?, ?, ?, NULL, NULL, NULL, NULL)",
        (REPO, iso(start), iso(start + span)),
    )
    rows = []
    for seq in range(1, journal + 1):
        at = start + seq * span // journal
        payload = {"run": f"run-{seq // 500}", "tick": seq, "builds": rng.randint(0, 9), "note": text(20)}
        rows.append((REPO, seq, iso(at), js({"kind": "dispatcher"}), "dispatcher.tick-completed", js(payload)))
        if len(rows) == 10_000:
            db.executemany("INSERT INTO repo_events VALUES (?, ?, ?, ?, ?, ?)", rows)
            rows.clear()
    db.executemany("INSERT INTO repo_events VALUES (?, ?, ?, ?, ?, ?)", rows)
    blob_bytes = 0
    for b in range(builds):
        slug = f"aut-{b:05d}-{rng.randrange(16**6):06x}"
        created = start + b * span // builds
        db.execute(
            "INSERT INTO builds VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL)",
            (slug, REPO, js({"source": "linear", "id": f"AUT-{b}"}), f"ab/aut-{b}", iso(created), iso(created + 3_600_000)),
        )
        events = []
        for seq in range(1, 101):
            payload = {"round": seq // 10, "summary": text(40), "files": [f"src/{w}.rs" for w in words[: seq % 5]]}
            events.append((slug, seq, iso(created + seq * 30_000), js({"kind": "agent", "role": "implementer"}), "observation.recorded", js(payload)))
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", events)
        kinds = [("plan", 0, 8), ("plan", 1, 8), ("implement-notes", 0, 16)] + [("transcript", r, 64) for r in range(3)]
        for kind, rev, kib in kinds:
            sha, size = blob(text(kib * 1024 // 6 * rng.randint(1, 4) // 4 + 1))
            blob_bytes += size
            db.execute(
                "INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?)",
                (slug, kind, rev, sha, js({"round": rev}), iso(created + 3_000_000 + rev)),
            )
    db.commit()
    db.close()
    print(f"{args.age}: {journal} journal events, {builds} builds ({builds * 100} events), "
          f"{builds * 6} artifacts, {blob_bytes / 1e6:.1f} MB of blobs in {args.dir}")


if __name__ == "__main__":
    main()
