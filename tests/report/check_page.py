#!/usr/bin/python3
"""Opens a report page (scripts/report_html.py) in headless Chromium and checks that
a person would see it whole:

  - it loaded with no console error, no uncaught exception and no failed load;
  - it asked for nothing outside the file itself (no http(s) request, every src and
    href a data: URI or an in-page anchor): it works offline;
  - the photo and every chart the report has (figure.chart[data-chart=...]: stages,
    roofline; energy and power when the report has "energy") decoded to a non-blank picture that is laid out on the page;
  - each answer's text from the report JSON is shown in its answer box (and, for a
    timing-only report without text, the device answer box is there), with its
    token ids;
  - every character of the answer text is drawn with a real glyph, not the empty
    box of a missing font ("tofu"): each distinct character is drawn on a canvas
    in the answer's font and compared with the drawing of U+10FFFD, a code point no
    font has;
  - a report of synthetic weights says so on the page;
  - a full-page screenshot was taken (--screenshot) and is not blank.

    /usr/bin/python3 tests/report/check_page.py --html PAGE --json REPORT [--screenshot OUT.png]

Exit 0 when the page passes, 1 with one line per problem otherwise, 2 when Chromium
cannot be started (it is installed by scripts/install-deps.sh; a missing browser is a
failure, not a skip). Talks to Chromium over --remote-debugging-pipe with the
standard library only.
"""
import argparse
import base64
import fcntl
import gzip
from html import escape as html_escape  # as scripts/report_html.py escapes text
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

CHARTS = ("stages", "roofline", "steps")
ENERGY_CHARTS = ("energy", "power")  # on pages of reports with "energy" (issue 15)


def charts_of(report):
    return CHARTS + (ENERGY_CHARTS if "energy" in report else ()) + (("headroom",) if report.get("numerics") else ())


class BrowserError(Exception):
    pass


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    raise BrowserError("chromium not found on PATH (scripts/install-deps.sh installs Debian's 'chromium')")


class Browser:
    """Headless Chromium driven through the DevTools protocol on fds 3 (in) and 4 (out)."""

    def __init__(self, timeout=60.0, env=None):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="gpnpu-chromium-")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # Park the child's ends above 10 so dup2 onto 3 and 4 cannot clobber each other.
        a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD_CLOEXEC, 10)
        b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_chrome_r)
        os.close(from_chrome_w)

        def child_fds():
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [find_chromium(), "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--force-color-profile=srgb",
                f"--user-data-dir={self.profile}", "about:blank"]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     preexec_fn=child_fds, close_fds=False, env=env)
        os.close(a)
        os.close(b)
        self.w = to_chrome_w
        self.r = from_chrome_r
        self.events = queue.Queue()
        self.results = {}
        self.cv = threading.Condition()
        self.next_id = 0
        self.closed = False
        threading.Thread(target=self._reader, daemon=True).start()
        try:
            self.call("Browser.getVersion")
        except BrowserError as e:
            self.close()
            raise BrowserError(f"chromium did not answer on its DevTools pipe: {e}; its log: {self.chrome_log()}")

    def chrome_log(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace").strip().replace("\n", " | ")[-600:]

    def _reader(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.r, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.closed = True
                    self.cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                m = json.loads(msg)
                if "id" in m:
                    with self.cv:
                        self.results[m["id"]] = m
                        self.cv.notify_all()
                else:
                    self.events.put(m)

    def call(self, method, params=None, session=None):
        with self.cv:
            self.next_id += 1
            mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self.w, data):]
        except OSError as e:
            raise BrowserError(f"{method}: pipe closed ({e})")
        deadline = time.monotonic() + self.timeout
        with self.cv:
            while mid not in self.results:
                if self.closed:
                    raise BrowserError(f"{method}: chromium exited")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"{method}: no answer in {self.timeout:.0f} s")
                self.cv.wait(left)
            m = self.results.pop(mid)
        if "error" in m:
            raise BrowserError(f"{method}: {m['error'].get('message')}")
        return m["result"]

    def close(self):
        try:
            if self.proc.poll() is None:
                try:
                    self.call("Browser.close")
                except BrowserError:
                    pass
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self.w, self.r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    # ------------------------------------------------------------------ one page

    def open(self, path, width=1400):
        """Loads file `path` in a fresh tab; returns (problems, facts, screenshot PNG bytes)."""
        while not self.events.empty():
            self.events.get_nowait()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            return self._check(s, os.path.abspath(path), width)
        finally:
            try:
                self.call("Target.closeTarget", {"targetId": target})
            except BrowserError:
                pass

    def _drain(self, s, until, stop=None):
        """Collects this session's events until `until` (monotonic), or `stop` seen."""
        got = []
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return got, False
            try:
                m = self.events.get(timeout=left)
            except queue.Empty:
                return got, False
            if m.get("sessionId") != s:
                continue
            got.append(m)
            if stop and m.get("method") == stop:
                return got, True

    def _check(self, s, path, width):
        for dom in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{dom}.enable", session=s)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=s)
        nav = self.call("Page.navigate", {"url": "file://" + path}, session=s)
        problems = []
        if nav.get("errorText"):
            problems.append(f"navigation failed: {nav['errorText']}")
        events, loaded = self._drain(s, time.monotonic() + self.timeout, stop="Page.loadEventFired")
        if not loaded:
            problems.append(f"the page did not finish loading in {self.timeout:.0f} s")
        facts = self.call("Runtime.evaluate", {"expression": FACTS_JS, "returnByValue": True, "awaitPromise": True},
                          session=s)
        if "exceptionDetails" in facts:
            problems.append(f"the page facts could not be read: {facts['exceptionDetails'].get('text')}")
            facts = {}
        else:
            facts = facts["result"]["value"]
        more, _ = self._drain(s, time.monotonic() + 0.5)  # late errors (timers, decode failures)
        events += more
        for m in events:
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                desc = (d.get("exception") or {}).get("description") or d.get("text")
                problems.append(f"uncaught exception: {str(desc).splitlines()[0]}")
            elif meth == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                problems.append(f"console.{p['type']}: {text[:200]}")
            elif meth == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                ent = p["entry"]
                problems.append(f"console error ({ent.get('source')}): {ent.get('text', '')[:200]} {ent.get('url', '')[:100]}")
            elif meth == "Network.requestWillBeSent":
                url = p.get("request", {}).get("url", "")
                if not (url.startswith("data:") or url == "file://" + path or url.startswith("file://" + path + "#")):
                    problems.append(f"the page requested {url[:120]} (it must not load anything)")
            elif meth == "Network.loadingFailed" and not p.get("canceled"):
                problems.append(f"a load failed: {p.get('errorText')}")
        metrics = self.call("Page.getLayoutMetrics", session=s)
        size = metrics.get("cssContentSize") or metrics.get("contentSize")
        h = max(1, min(int(size["height"]), 16000))
        shot = self.call("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": True,
                          "clip": {"x": 0, "y": 0, "width": width, "height": h, "scale": 1}}, session=s)
        return problems, facts, base64.b64decode(shot["data"])


# Runs in the page: what a person would see. Charts are drawn to a canvas to check
# that they are not blank (data: images do not taint a canvas).
FACTS_JS = r"""
(async () => {
  const distinctColours = (img) => {
    const c = document.createElement('canvas');
    const w = Math.min(img.naturalWidth, 400), h = Math.min(img.naturalHeight, 400);
    if (!w || !h) return 0;
    c.width = w; c.height = h;
    const g = c.getContext('2d'); g.drawImage(img, 0, 0, w, h);
    const d = g.getImageData(0, 0, w, h).data, seen = new Set();
    for (let i = 0; i < d.length && seen.size < 64; i += 4 * 7) seen.add((d[i] << 16) | (d[i+1] << 8) | d[i+2]);
    return seen.size;
  };
  const imgFacts = async (img) => {
    if (!img) return null;
    try { await img.decode(); } catch (e) {}
    const r = img.getBoundingClientRect();
    return {loaded: img.complete && img.naturalWidth > 0 && img.naturalHeight > 0,
            natural: [img.naturalWidth, img.naturalHeight], shown: [r.width, r.height],
            colours: img.naturalWidth ? distinctColours(img) : 0};
  };
  // Tofu: a character no installed font has is drawn as the primary font's empty box,
  // the same drawing as U+10FFFD (plane 16 private use: in no font).
  const glyphFacts = (el) => {
    if (!el) return null;
    const st = getComputedStyle(el);
    const c = document.createElement('canvas');
    c.width = 48; c.height = 48;
    const g = c.getContext('2d', {willReadFrequently: true});
    const draw = (ch) => {
      g.clearRect(0, 0, 48, 48);
      g.font = `${st.fontStyle} ${st.fontWeight} 32px ${st.fontFamily}`;
      g.fillStyle = '#000'; g.textBaseline = 'top';
      g.fillText(ch, 4, 4);
      const d = g.getImageData(0, 0, 48, 48).data;
      let h = 0, ink = 0;
      for (let i = 3; i < d.length; i += 4) { h = (Math.imul(h, 31) + d[i]) | 0; if (d[i]) ink++; }
      return {h, ink};
    };
    const tofu = draw('\u{10FFFD}');
    const chars = [...new Set([...el.innerText].filter(ch => ch.trim() !== '' && !/[\p{M}\p{Cf}]/u.test(ch)))];
    const missing = chars.slice(0, 400).filter(ch => { const d = draw(ch); return d.ink === 0 || d.h === tofu.h; });
    return {chars: chars.length, missing: missing.slice(0, 12).map(ch => ch + ' U+' + ch.codePointAt(0).toString(16).toUpperCase()),
            missing_count: missing.length};
  };
  const charts = [];
  for (const f of document.querySelectorAll('figure.chart')) {
    charts.push({name: f.dataset.chart || '', img: await imgFacts(f.querySelector('img'))});
  }
  const refs = [];
  for (const n of document.querySelectorAll('[src],[href],[srcset],[poster],[data]'))
    for (const a of ['src', 'href', 'srcset', 'poster', 'data'])
      if (n.hasAttribute(a)) refs.push(n.getAttribute(a));
  const styles = [...document.querySelectorAll('style')].map(s => s.textContent).join('\n');
  return {
    title: document.title,
    text: document.body ? document.body.innerText : '',
    photo: await imgFacts(document.getElementById('photo')),
    charts,
    external: refs.filter(u => !/^\s*(data:|#)/i.test(u)).map(u => u.slice(0, 120)),
    css_urls: (styles.match(/url\(\s*['"]?(?!data:)[^)]*\)|@import/gi) || []),
    answers: [...document.querySelectorAll('[data-answer]')].map(a => ({
      name: a.dataset.answer, text: (a.querySelector('.text') || {innerText: ''}).innerText,
      ids: (a.querySelector('.ids') || {innerText: ''}).innerText,
      glyphs: glyphFacts(a.querySelector('.text'))})),
    synthetic: !!document.getElementById('synthetic'),
  };
})()
"""


def norm(s):
    return " ".join(str(s).split())


def load_json(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def judge(report, problems, facts, shot):
    """Adds to `problems` whatever the page facts say is missing."""
    problems = list(problems)
    if not facts:
        return problems + ["no page facts"]
    photo = facts.get("photo")
    if not photo or not photo["loaded"] or photo["colours"] < 2 or photo["shown"][0] < 16:
        problems.append(f"the photo did not render: {photo}")
    charts = {c["name"]: c["img"] for c in facts.get("charts", [])}
    for name in charts_of(report):
        c = charts.get(name)
        if c is None:
            problems.append(f"chart '{name}' is missing from the page")
        elif not c["loaded"]:
            problems.append(f"chart '{name}' did not render (its image did not decode)")
        elif c["colours"] < 8:
            problems.append(f"chart '{name}' is blank ({c['colours']} colours)")
        elif c["shown"][0] < 200 or c["shown"][1] < 100:
            problems.append(f"chart '{name}' is laid out too small to see: {c['shown']}")
    if facts.get("external"):
        problems.append(f"the page refers to outside resources: {facts['external'][:5]}")
    if facts.get("css_urls"):
        problems.append(f"the page's CSS loads outside resources: {facts['css_urls'][:5]}")
    shown = {a["name"]: norm(a["text"]) for a in facts.get("answers", [])}
    body = norm(facts.get("text", ""))
    for name, a in report["answers"].items():
        if name not in shown:
            problems.append(f"answer '{name}' has no box on the page")
            continue
        if a.get("text") is not None:
            want = norm(a["text"])
            if want and (want not in shown[name] or want not in body):
                problems.append(f"answer '{name}' text is not shown: expected {want[:80]!r}")
            box = next(x for x in facts["answers"] if x["name"] == name)
            gl = box.get("glyphs") or {}
            if gl.get("missing_count"):
                problems.append(f"answer '{name}' text has {gl['missing_count']} characters drawn as empty boxes "
                                f"(no font has them; scripts/install-deps.sh installs fonts-noto-cjk): "
                                f"{', '.join(gl['missing'])}")
        ids = " ".join(str(i) for i in a["ids"])
        box_ids = next(x for x in facts["answers"] if x["name"] == name).get("ids", "")
        if ids and ids not in norm(box_ids):
            problems.append(f"answer '{name}' token ids are not shown: expected {ids[:60]!r}")
    synthetic = report["model"].get("synthetic")
    if synthetic is None:
        synthetic = report["model"]["spec"].startswith("synthetic:")
    if synthetic and not facts.get("synthetic"):
        problems.append("the page does not say that the weights are synthetic (random) and the text meaningless")
    if not shot.startswith(b"\x89PNG") or len(shot) < 2000:
        problems.append(f"the screenshot is not a picture ({len(shot)} bytes)")
    return problems


def check(browser, html_path, report, screenshot=None):
    problems, facts, shot = browser.open(html_path)
    if screenshot:
        tmp = screenshot + ".tmp"
        with open(tmp, "wb") as f:
            f.write(shot)
        os.replace(tmp, screenshot)
    return judge(report, problems, facts, shot), facts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html", required=True)
    ap.add_argument("--json", required=True, help="the report the page was made from (answers to look for)")
    ap.add_argument("--screenshot", help="write the full-page screenshot here (PNG)")
    a = ap.parse_args()
    report = load_json(a.json)
    try:
        b = Browser()
    except BrowserError as e:
        print(f"check_page: {e}", file=sys.stderr)
        return 2
    try:
        problems, _ = check(b, a.html, report, a.screenshot)
    finally:
        b.close()
    for p in problems:
        print(f"check_page: {a.html}: {p}")
    if not problems:
        print(f"check_page: {a.html}: OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
