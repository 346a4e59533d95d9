"""`esnfed download` against a local HTTP server on 127.0.0.1 (never a remote host): full, resumed and
interrupted downloads, verification failures, and the unpacked raw layout of nested zips."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.data import hhar, hhar_source
from esnfed_core.data.hhar_synth import synthesize_hhar
from esnfed_core.errors import DataError
from esnfed_stages.data import download

runner = CliRunner()


class Server:
    """Serves ``payload`` at /archive.zip; honours Range unless told not to; can cut the first
    response short to simulate a dropped connection. Records every request's Range header."""

    def __init__(self, payload: bytes, honour_range: bool = True, cut_after: int | None = None):
        self.payload, self.honour_range, self.cut_after = payload, honour_range, cut_after
        self.ranges: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_GET(self):
                if self.path != "/archive.zip":
                    self.send_error(404, "Not Found")
                    return
                rng = self.headers.get("Range")
                outer.ranges.append(rng)
                data, start, status = outer.payload, 0, 200
                if rng and outer.honour_range:
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Content-Type", "application/zip")
                self.end_headers()
                body = data[start:]
                if outer.cut_after is not None and len(outer.ranges) == 1:
                    self.wfile.write(body[: outer.cut_after])  # then drop the connection
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/archive.zip"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def hhar_zip(tmp_path_factory) -> tuple[bytes, dict[str, bytes]]:
    """A synthetic UCI archive with the real nested layout, and the CSVs it must unpack to."""
    root = tmp_path_factory.mktemp("hhar_zip")
    csvs = synthesize_hhar(root / "csv", seed=5, seconds_per_activity=2.0, gap_seconds=0.4, users=("a",))
    (path,) = synthesize_hhar(root / "zip", seed=5, seconds_per_activity=2.0, gap_seconds=0.4, users=("a",),
                              layout="zip")
    return path.read_bytes(), {p.name: p.read_bytes() for p in csvs}


def _nothing_in(folder: Path) -> bool:
    """The download cache holds nothing (the folder the run made for it may be gone with it)."""
    return not folder.exists() or not any(folder.iterdir())


def _fetch_cli(out: Path, url: str, *extra: str):
    return runner.invoke(app, ["download", "--dataset", "hhar", "--out", str(out), "--url", url, *extra])


def _part(cache: Path, url: str) -> Path:
    return download.cache_paths(download.spec_for("hhar", url), cache)[1]


def _assert_unpacked(out: Path, payload: bytes, csvs: dict[str, bytes]) -> None:
    folder = out / "HHAR" / hhar_source.FOLDER
    assert {p.name: p.read_bytes() for p in folder.glob("*.csv")} == csvs
    assert not list((out / "HHAR").glob("*.zip"))  # nested zips replaced by their content
    assert (out / "HHAR" / "Still exp").is_dir()
    receipt = json.loads((out / "HHAR" / "download.json").read_text())
    assert receipt["sha256"] == hashlib.sha256(payload).hexdigest() and receipt["size"] == len(payload)
    assert receipt["sha256_known"] is False and "zip-crc" in receipt["verified"]


def _no_leftovers(out: Path) -> None:
    assert not (out / "HHAR").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".HHAR")] if out.exists() else True


def test_full_download_through_the_cli(tmp_path, hhar_zip):
    payload, csvs = hhar_zip
    with Server(payload) as server:
        result = _fetch_cli(tmp_path / "raw", server.url)
    assert result.exit_code == 0, result.output + (result.stderr or "")
    assert server.ranges == [None]
    _assert_unpacked(tmp_path / "raw", payload, csvs)
    assert _nothing_in(tmp_path / "raw" / ".downloads")  # archive removed after unpacking
    assert hashlib.sha256(payload).hexdigest() in result.output
    # the unpacked files read like any raw HHAR
    (user, data, _), = hhar.preprocess_hhar(tmp_path / "raw", {})
    assert user == "a" and data.windows > 0


def test_resume_from_a_partial_file(tmp_path, hhar_zip):
    payload, csvs = hhar_zip
    cache = tmp_path / "cache"
    cache.mkdir()
    half = len(payload) // 2
    server = Server(payload)
    _part(cache, server.url).write_bytes(payload[:half])
    seen = []
    with server:
        result = download.run("hhar", tmp_path / "raw", url=server.url, cache_dir=cache, keep_archive=True,
                              progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert server.ranges == [f"bytes={half}-"]
    assert result.resumed_from == half and result.size == len(payload)
    assert download.cache_paths(download.spec_for("hhar", server.url), cache)[0].read_bytes() == payload  # kept on request
    assert seen[0] == ("download", half, len(payload)) and ("download", len(payload), len(payload)) in seen
    _assert_unpacked(tmp_path / "raw", payload, csvs)


def test_dropped_connection_is_resumed(tmp_path, hhar_zip):
    payload, csvs = hhar_zip
    with Server(payload, cut_after=10_000) as server:
        result = download.run("hhar", tmp_path / "raw", url=server.url)
    assert server.ranges == [None, "bytes=10000-"]
    assert result.size == len(payload)
    _assert_unpacked(tmp_path / "raw", payload, csvs)


def test_dropped_connection_without_retries_keeps_the_partial_file(tmp_path, hhar_zip):
    payload, _ = hhar_zip
    with Server(payload, cut_after=10_000) as server:
        with pytest.raises(DataError, match="interrupted after 10000 bytes.*run the same command again"):
            download.run("hhar", tmp_path / "raw", url=server.url, retries=0)
    part = _part(tmp_path / "raw" / ".downloads", server.url)
    assert part.read_bytes() == payload[:10_000]
    _no_leftovers(tmp_path / "raw")


def test_server_ignoring_range_restarts(tmp_path, hhar_zip):
    payload, csvs = hhar_zip
    cache = tmp_path / "raw" / ".downloads"
    cache.mkdir(parents=True)
    server = Server(payload, honour_range=False)
    _part(cache, server.url).write_bytes(b"x" * 500)  # foreign bytes
    with server:
        result = download.run("hhar", tmp_path / "raw", url=server.url)
    assert server.ranges == ["bytes=500-"] and result.resumed_from == 0
    _assert_unpacked(tmp_path / "raw", payload, csvs)


def test_complete_partial_file_is_not_downloaded_again(tmp_path, hhar_zip):
    payload, csvs = hhar_zip
    cache = tmp_path / "raw" / ".downloads"
    cache.mkdir(parents=True)
    server = Server(payload)
    _part(cache, server.url).write_bytes(payload)
    with server:
        download.run("hhar", tmp_path / "raw", url=server.url)
    assert server.ranges == [f"bytes={len(payload)}-"]  # answered 416: nothing left to fetch
    _assert_unpacked(tmp_path / "raw", payload, csvs)


def test_checksum_mismatch_leaves_nothing(tmp_path, hhar_zip):
    payload, _ = hhar_zip
    wrong = "0" * 64
    with Server(payload) as server:
        result = _fetch_cli(tmp_path / "raw", server.url, "--sha256", wrong)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "sha256 mismatch" in lines[0] and wrong in lines[0]
    assert hashlib.sha256(payload).hexdigest() in lines[0]
    _no_leftovers(tmp_path / "raw")
    assert _nothing_in(tmp_path / "raw" / ".downloads")  # the bad download is removed
    # with the right checksum the same command succeeds and records that it was checked
    with Server(payload) as server:
        result = _fetch_cli(tmp_path / "raw", server.url, "--sha256", hashlib.sha256(payload).hexdigest())
    assert result.exit_code == 0, result.output + (result.stderr or "")
    assert "sha256" in json.loads((tmp_path / "raw" / "HHAR" / "download.json").read_text())["verified"]


def test_size_mismatch_and_corrupt_archive(tmp_path, hhar_zip):
    payload, _ = hhar_zip
    with Server(payload) as server:
        result = _fetch_cli(tmp_path / "raw", server.url, "--size", str(len(payload) + 1))
    assert result.exit_code == 1 and f"expected {len(payload) + 1}" in result.stderr
    _no_leftovers(tmp_path / "raw")
    broken = bytearray(payload)
    broken[len(broken) // 3: len(broken) // 3 + 64] = b"\0" * 64  # damages compressed data
    with Server(bytes(broken)) as server:
        result = _fetch_cli(tmp_path / "raw", server.url)
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "heterogeneity+activity+recognition.zip" in result.stderr
    _no_leftovers(tmp_path / "raw")


def test_http_error_and_bad_options(tmp_path, hhar_zip):
    payload, _ = hhar_zip
    with Server(payload) as server:
        result = _fetch_cli(tmp_path / "raw", server.url.replace("archive", "missing"))
    assert result.exit_code == 1 and "HTTP 404" in result.stderr
    result = _fetch_cli(tmp_path / "raw", "ftp://example.invalid/x.zip")
    assert result.exit_code == 1 and "--url: expected an http(s) address" in result.stderr
    result = _fetch_cli(tmp_path / "raw", "http://127.0.0.1:9/x.zip", "--sha256", "abc")
    assert result.exit_code == 1 and "--sha256: expected 64 hex digits" in result.stderr


def test_existing_folder_needs_force(tmp_path, hhar_zip):
    payload, csvs = hhar_zip
    old = tmp_path / "raw" / "HHAR" / "old.txt"
    old.parent.mkdir(parents=True)
    old.write_text("earlier data")
    with Server(payload) as server:
        result = _fetch_cli(tmp_path / "raw", server.url)
        assert result.exit_code == 1 and "pass --force" in result.stderr and old.exists()
        assert server.ranges == []  # refused before downloading anything
        result = _fetch_cli(tmp_path / "raw", server.url, "--force")
    assert result.exit_code == 0 and not old.exists()
    _assert_unpacked(tmp_path / "raw", payload, csvs)


def test_no_unpack_keeps_the_zip_readable_in_place(tmp_path, hhar_zip):
    payload, _ = hhar_zip
    with Server(payload) as server:
        result = _fetch_cli(tmp_path / "raw", server.url, "--no-unpack")
    assert result.exit_code == 0, result.output + (result.stderr or "")
    assert (tmp_path / "raw" / "HHAR" / hhar_source.OUTER_ZIP).read_bytes() == payload
    (user, data, _), = hhar.preprocess_hhar(tmp_path / "raw", {})
    assert user == "a" and data.windows > 0


def _wesad_zip(extra: dict[str, bytes] | None = None) -> bytes:
    e4 = io.BytesIO()
    with zipfile.ZipFile(e4, "w") as z:
        z.writestr("ACC.csv", "1495437325.000000\n32.000000\n-13,59,25\n")
        z.writestr("EDA.csv", "1495437325.000000\n4.000000\n0.1\n")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("WESAD/wesad_readme.pdf", b"%PDF-1.4 stub")
        z.writestr("WESAD/S2/S2.pkl", b"stub pickle bytes")
        z.writestr("WESAD/S2/S2_E4_Data.zip", e4.getvalue())
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return buf.getvalue()


def test_wesad_layout_with_nested_e4_zip(tmp_path):
    payload = _wesad_zip()
    with Server(payload) as server:
        # the known WESAD size is enforced unless --size overrides it
        result = runner.invoke(app, ["download", "--dataset", "wesad", "--out", str(tmp_path / "raw"),
                                     "--url", server.url])
        assert result.exit_code == 1 and "expected 2249444501" in result.stderr
        assert not (tmp_path / "raw" / "WESAD").exists()
        result = runner.invoke(app, ["download", "--dataset", "wesad", "--out", str(tmp_path / "raw"),
                                     "--url", server.url, "--size", "0"])
    assert result.exit_code == 0, result.output + (result.stderr or "")
    root = tmp_path / "raw" / "WESAD"
    assert (root / "S2" / "S2.pkl").read_bytes() == b"stub pickle bytes"
    assert (root / "S2" / "S2_E4_Data" / "ACC.csv").read_text().startswith("1495437325")
    assert not (root / "S2" / "S2_E4_Data.zip").exists() and (root / "wesad_readme.pdf").is_file()


def test_member_escaping_the_folder_is_refused(tmp_path):
    payload = _wesad_zip({"WESAD/../../evil.txt": b"owned"})
    with Server(payload) as server:
        result = runner.invoke(app, ["download", "--dataset", "wesad", "--out", str(tmp_path / "raw"),
                                     "--url", server.url, "--size", "0"])
    assert result.exit_code == 1 and "would be written outside the target folder" in result.stderr
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "raw" / "evil.txt").exists()
    assert not (tmp_path / "raw" / "WESAD").exists()


def test_known_archives_are_the_official_ones():
    assert download.KNOWN["hhar"].url == (
        "https://archive.ics.uci.edu/static/public/344/heterogeneity+activity+recognition.zip")
    assert download.KNOWN["wesad"].url == "https://uni-siegen.sciebo.de/s/HGdUkoNlW1Ub0Gx/download"
    assert download.KNOWN["wesad"].size == 2_249_444_501
    assert all(spec.sha256 is None for spec in download.KNOWN.values())  # none is published


# ----------------------------------------------------------------------------------------------
# Limits: expected size, Range answers, redirects, deadline, cache key
# ----------------------------------------------------------------------------------------------
class Scripted:
    """A 127.0.0.1 server whose GET handler is ``respond(handler)``; counts the bytes it sent."""

    def __init__(self, respond):
        self.sent = 0
        self.stop = threading.Event()  # set on exit: a handler still sending gives up
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                try:
                    respond(self, outer)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: expected for the limits tested here

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/archive.zip"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    __enter__ = Server.__enter__

    def __exit__(self, *exc):
        self.stop.set()
        Server.__exit__(self, *exc)


def _endless(h, srv):
    """No Content-Length, then 1 KiB blocks for as long as the client reads (at most 256 MiB)."""
    h.send_response(200)
    h.end_headers()
    block = b"z" * 1024
    for _ in range(256 * 1024):
        if srv.stop.is_set():
            return
        h.wfile.write(block)
        srv.sent += len(block)


def test_download_stops_as_soon_as_it_passes_the_expected_size(tmp_path):
    with Scripted(_endless) as server:
        with pytest.raises(DataError, match="more than the expected 5000 bytes"):
            download.run("hhar", tmp_path / "raw", url=server.url, size=5000)
    assert server.sent < 64 << 20  # it stopped reading long before the server's 256 MiB
    assert _nothing_in(tmp_path / "raw" / ".downloads")  # nothing kept
    _no_leftovers(tmp_path / "raw")


def test_download_of_unknown_size_stops_at_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(download, "MAX_UNKNOWN_SIZE", 10_000)  # no --size, no Content-Length
    with Scripted(_endless) as server:
        with pytest.raises(DataError, match="more than the expected 10000 bytes"):
            download.run("hhar", tmp_path / "raw", url=server.url)
    assert server.sent < 64 << 20
    assert _nothing_in(tmp_path / "raw" / ".downloads")


def test_announced_size_other_than_expected_is_refused_before_reading(tmp_path, hhar_zip):
    payload, _ = hhar_zip
    with Server(payload) as server:
        with pytest.raises(DataError, match=f"announces {len(payload)} bytes, expected {len(payload) - 1}"):
            download.run("hhar", tmp_path / "raw", url=server.url, size=len(payload) - 1)


def test_partial_answer_from_another_offset_is_refused(tmp_path, hhar_zip):
    payload, _ = hhar_zip

    def wrong_start(h, srv):  # answers 206 from byte 0 whatever was asked
        h.send_response(206)
        h.send_header("Content-Range", f"bytes 0-{len(payload) - 1}/{len(payload)}")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    cache = tmp_path / "cache"
    cache.mkdir()
    server = Scripted(wrong_start)
    part = _part(cache, server.url)
    part.write_bytes(payload[:1000])
    with server:
        with pytest.raises(DataError, match="bytes from 1000 on.*'bytes 0-"):
            download.run("hhar", tmp_path / "raw", url=server.url, cache_dir=cache)
    assert part.read_bytes() == payload[:1000]  # not spliced with the wrong bytes
    _no_leftovers(tmp_path / "raw")


def test_redirect_from_https_to_http_is_refused():
    handler = download._NoDowngrade()
    req = urllib.request.Request("https://127.0.0.1:1/archive.zip")
    with pytest.raises(DataError, match="refused a redirect from https to http://127.0.0.1:2/x.zip"):
        handler.redirect_request(req, None, 302, "Found", {}, "http://127.0.0.1:2/x.zip")
    kept = handler.redirect_request(req, None, 302, "Found", {}, "https://127.0.0.1:2/x.zip")
    assert kept.full_url == "https://127.0.0.1:2/x.zip"  # https to https is followed


def test_redirect_within_http_is_followed(tmp_path, hhar_zip):
    payload, csvs = hhar_zip
    with Server(payload) as target:
        def moved(h, srv):
            h.send_response(302)
            h.send_header("Location", target.url)
            h.send_header("Content-Length", "0")
            h.end_headers()

        with Scripted(moved) as server:
            download.run("hhar", tmp_path / "raw", url=server.url)
    _assert_unpacked(tmp_path / "raw", payload, csvs)


def test_overall_deadline(tmp_path):
    def trickle(h, srv):  # 1 byte every 50 ms: never idle past --timeout, never done
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        for _ in range(2000):
            if srv.stop.is_set():
                return
            h.wfile.write(b"z")
            h.wfile.flush()
            srv.sent += 1
            time.sleep(0.05)

    with Scripted(trickle) as server:
        t0 = time.monotonic()
        result = _fetch_cli(tmp_path / "raw", server.url, "--deadline", "1", "--timeout", "5")
        seconds = time.monotonic() - t0
    assert result.exit_code == 1 and "deadline of 1 s passed" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert seconds < 8  # well before the server's 100 s
    _no_leftovers(tmp_path / "raw")


def test_cache_is_keyed_by_url_and_size(tmp_path, hhar_zip):
    payload, csvs = hhar_zip
    other = _wesad_zip()  # any other valid zip, served from another address
    cache = tmp_path / "cache"
    with Server(other) as old:
        download.run("hhar", tmp_path / "old", url=old.url, cache_dir=cache, unpack=False, keep_archive=True)
    with Server(payload) as new:
        assert download.cache_paths(download.spec_for("hhar", new.url), cache) != \
            download.cache_paths(download.spec_for("hhar", old.url), cache)
        result = download.run("hhar", tmp_path / "raw", url=new.url, cache_dir=cache)
    assert new.ranges == [None]  # fetched, not served from the archive of the old address
    assert result.sha256 == hashlib.sha256(payload).hexdigest()
    _assert_unpacked(tmp_path / "raw", payload, csvs)
    a = download.spec_for("hhar", new.url, size=len(payload))
    assert download.cache_paths(a, cache) != download.cache_paths(download.spec_for("hhar", new.url), cache)


def test_conflicting_archive_is_one_line_and_leaves_nothing(tmp_path):
    # a file 'WESAD/S2' where the archive also needs the folder 'WESAD/S2/'
    payload = _wesad_zip({"WESAD/S2/S2_E4_Data/ACC.csv": b"outer archive's file"})
    with Server(payload) as server:
        result = runner.invoke(app, ["download", "--dataset", "wesad", "--out", str(tmp_path / "raw"),
                                     "--url", server.url, "--size", "0"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "S2_E4_Data.zip" in line and "which the archive already holds" in line
    assert not (tmp_path / "raw" / "WESAD").exists()
    assert not [p for p in (tmp_path / "raw").iterdir() if p.name.startswith(".WESAD")]


def test_nothing_received_names_no_partial_file_to_resume_from(tmp_path):
    """A refused connection: the error says nothing was received, not 'resume from <a .part file
    that does not exist>'; nothing is left under the raw root."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DataError) as err:
        download.run("hhar", tmp_path / "raw", url=f"http://127.0.0.1:{port}/hhar.zip", retries=0)
    assert "interrupted after 0 bytes" in str(err.value) and "nothing was received" in str(err.value)
    assert "resume from" not in str(err.value)
    assert not (tmp_path / "raw").exists() or not any((tmp_path / "raw").rglob("*.part"))
