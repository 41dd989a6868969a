"""Read every answer a plan names through one of Python's HTTP clients, as
its users do, and keep what the client decoded (tests/it/http_clients.rs).

    python read.py PLAN CLIENT OUT

PLAN is the test's JSON plan: the headers every request carries and the
reads, each a URL, the Accept-Encoding to send and the name of its output.
CLIENT is urllib3, requests or httpx. Each read's decoded body goes to
OUT/NAME and what came with it to OUT/NAME.json (status, Content-Encoding,
the client's error if it failed); OUT/decodes.json lists the codings the
client decodes. One client object serves every read, so connections are
reused as an application's are; after an error a new one is made.
"""

import json
import os
import sys

import httpx
import requests
import urllib3


def reader(client):
    """A function reading one URL with these headers: (status, encoding, body)."""
    if client == "urllib3":
        pool = urllib3.PoolManager(retries=False)

        def read(url, headers):
            # .data: the whole body, decoded as urllib3 decodes it.
            response = pool.request("GET", url, headers=headers)
            return response.status, response.headers.get("content-encoding"), response.data

    elif client == "requests":
        session = requests.Session()

        def read(url, headers):
            # .content streams the body and decodes it a read at a time.
            response = session.get(url, headers=headers)
            return response.status_code, response.headers.get("content-encoding"), response.content

    elif client == "httpx":
        session = httpx.Client(timeout=60)

        def read(url, headers):
            # .content: decoded a read at a time as the body arrives.
            response = session.get(url, headers=headers)
            return response.status_code, response.headers.get("content-encoding"), response.content

    else:
        raise SystemExit(f"unknown client {client!r}")
    return read


def main():
    plan_path, client, out = sys.argv[1:4]
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    os.makedirs(out, exist_ok=True)
    # Each client decodes gzip itself and br and zstd with the pinned
    # packages (requirements.txt).
    with open(os.path.join(out, "decodes.json"), "w", encoding="utf-8") as f:
        json.dump(["identity", "gzip", "br", "zstd"], f)
    read = reader(client)
    for item in plan["reads"]:
        headers = dict(plan["headers"])
        headers["accept-encoding"] = item["accept"]
        meta = {"status": None, "encoding": None, "error": None}
        body = b""
        try:
            meta["status"], meta["encoding"], body = read(item["url"], headers)
        except Exception as err:  # the cell's failure, reported by the test
            meta["error"] = f"{type(err).__module__}.{type(err).__name__}: {err}"
            read = reader(client)
        with open(os.path.join(out, item["name"]), "wb") as f:
            f.write(body)
        with open(os.path.join(out, item["name"] + ".json"), "w", encoding="utf-8") as f:
            json.dump(meta, f)


if __name__ == "__main__":
    main()
