"""A report.html (cp_jax.bench.html_report) as a real browser draws it: headless Chromium (the Debian
package `chromium`) takes a screenshot of its first --height pixels at 1280 px wide, from disk, no network;
the blank below the page is cut off and the PNG kept to 256 colours (a few hundred KB for a main job's).

    python benchmarks/screenshot_report.py --report=runs/main/report.html --out=report.png [--height=8000]

Exits with status 1 and says why when Chromium is not installed (`apt-get install chromium`) or the report
is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from PIL import Image, ImageChops


def screenshot(report: str, out: str, height: int = 8000) -> str:
    """The PNG of report's first `height` pixels at 1280 px wide, trimmed (module docstring), written to out;
    returns out. Raises FileNotFoundError without Chromium or the report, RuntimeError when Chromium writes
    no screenshot."""
    if not os.path.isfile(report):
        raise FileNotFoundError(f"no report at {report}")
    browser = shutil.which("chromium")
    if browser is None:
        raise FileNotFoundError("chromium is not installed (Debian: apt-get install chromium)")
    if os.path.exists(out):
        os.remove(out)  # a screenshot left from before must not pass for this one
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                              f"--user-data-dir={profile}", f"--screenshot={os.path.abspath(out)}",
                              f"--window-size=1280,{height}", f"file://{os.path.abspath(report)}"],
                             capture_output=True, text=True, timeout=180)
    if not os.path.exists(out):
        raise RuntimeError(f"chromium wrote no screenshot (exit {res.returncode}): {res.stderr[-2000:]}")
    page = Image.open(out).convert("RGB")
    drawn = ImageChops.difference(page, Image.new("RGB", page.size, "white")).getbbox() or (0, 0, 1, 1)
    page.crop((0, 0, page.width, min(page.height, drawn[3] + 24))).quantize(256, Image.Quantize.FASTOCTREE).save(
        out, optimize=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", required=True, help="the report.html to draw")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--height", type=int, default=8000, help="pixels of the page drawn at most, from its top")
    args = ap.parse_args()
    try:
        print(screenshot(args.report, args.out, args.height))
    except FileNotFoundError as e:
        sys.exit(f"screenshot_report: {e}")


if __name__ == "__main__":
    main()
