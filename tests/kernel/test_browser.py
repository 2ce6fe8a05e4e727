"""The notebooks in a real front end, driven in a real browser: JupyterLab
(build/lab-venv, made with pip when missing) started headless on localhost,
Debian's chromium and chromium-driver driven by selenium.

The three teaching notebooks and the seed notebook (scripts/notebooks/, copied
into a temporary folder so JupyterLab's autosave cannot touch the originals)
run all their cells on the ldist kernel (conftest's kernelspec), and then:

- no cell ends in an error, every code cell ran;
- every SVG output (timelines, plots) renders as an image: an <img> whose
  picture decoded (naturalWidth > 0);
- the fit progress bar updates in place: its output changes text while the
  fit runs, and the cell keeps fewer progress outputs than the texts it
  showed (a log would keep one per update);
- the progress fits the output area: no horizontal scroll, and val_loss lies
  inside the area's box;
- Tab after `model:` offers `fit`;
- the toolbar's interrupt button stops a long fit, the kernel stays the same
  (same id, no restart) and keeps its variables;
- a screenshot of each notebook goes to build/browser-<notebook>.png.

Skipped, with the reason, only where chromium or chromium-driver is not
installed (scripts/setup.sh installs them)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

from conftest import KERNEL, ROOT

NOTEBOOKS = os.path.join(ROOT, "scripts", "notebooks")
ORDER = ("seed.ipynb", "sync_vs_async.ipynb", "data_parallel_from_scratch.ipynb", "your_own_data.ipynb")
VENV = os.path.join(ROOT, "build", "lab-venv")
VPY = os.path.join(VENV, "bin", "python")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
RUN_SECONDS = 150      # a hang guard for one notebook; each runs in seconds

if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
    pytest.skip("the browser test needs Debian's chromium and chromium-driver "
                "(apt-get install chromium chromium-driver; scripts/setup.sh installs them)",
                allow_module_level=True)


def ensure_venv():
    ok = os.access(VPY, os.X_OK) and subprocess.run(
        [VPY, "-c", "import jupyterlab, selenium"], capture_output=True).returncode == 0
    if not ok:
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([VPY, "-m", "pip", "install", "-q", "jupyterlab", "selenium"], check=True)
    site = subprocess.run([VPY, "-c", "import selenium, os; print(os.path.dirname(os.path.dirname(selenium.__file__)))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    try:
        import selenium  # noqa: F401
    except ImportError:
        sys.path.append(site)     # selenium from the venv; nothing else of it is imported here


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def lab():
    ensure_venv()
    work = tempfile.mkdtemp(prefix="ldist-lab-")
    for name in os.listdir(NOTEBOOKS):
        src = os.path.join(NOTEBOOKS, name)
        if name.endswith(".ipynb"):
            nb = json.load(open(src))
            nb["metadata"]["kernelspec"]["name"] = KERNEL      # the freshly built ldist
            json.dump(nb, open(os.path.join(work, name), "w"))
        elif os.path.isfile(src):
            shutil.copy(src, work)
    port, token = free_port(), "ldist-browser-test"
    cfg = tempfile.mkdtemp(prefix="ldist-labcfg-")
    env = dict(os.environ, JUPYTER_CONFIG_DIR=cfg)
    # every cell in the page (JupyterLab 4 attaches only the visible ones by
    # default), so every output can be checked
    settings = os.path.join(cfg, "lab", "user-settings", "@jupyterlab", "notebook-extension")
    os.makedirs(settings)
    json.dump({"windowingMode": "none"}, open(os.path.join(settings, "tracker.jupyterlab-settings"), "w"))
    settings = os.path.join(cfg, "lab", "user-settings", "@jupyterlab", "apputils-extension")
    os.makedirs(settings)      # no "get notified about news?" over the screenshots
    json.dump({"fetchNews": "false", "checkForUpdates": False},
              open(os.path.join(settings, "notification.jupyterlab-settings"), "w"))
    logpath = os.path.join(cfg, "lab.log")
    log = open(logpath, "w")
    proc = subprocess.Popen([os.path.join(VENV, "bin", "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", "--allow-root",
                             f"--port={port}", f"--IdentityProvider.token={token}", "--expose-app-in-browser",
                             f"--ServerApp.root_dir={work}", "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail("JupyterLab did not start:\n" + open(logpath).read()[-3000:])
            time.sleep(0.5)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_script_timeout(30)
    try:
        yield {"driver": driver, "base": base, "token": token, "work": work}
    finally:
        driver.quit()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


# ---- JavaScript run in the page (JupyterLab's app object: --expose-app-in-browser)

WATCH_PROGRESS = """
// every progress output's texts over time, keyed by its node
window.__prog = {seen: new Map()};
new MutationObserver(() => {
  const w = window.jupyterapp.shell.currentWidget;
  for (const p of w.node.querySelectorAll('.jp-OutputArea-output progress')) {
    const out = p.closest('.jp-OutputArea-output');
    if (!window.__prog.seen.has(out)) window.__prog.seen.set(out, new Set());
    window.__prog.seen.get(out).add(out.textContent + '|' + p.value);
  }
}).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
"""

STATE = """
const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
if (!w || !w.content || !w.sessionContext || !w.sessionContext.session || !w.sessionContext.session.kernel) return null;
const cells = w.content.widgets.filter(c => c.model.type === 'code');
return {
  kernel: w.sessionContext.session.kernel.name,
  kernel_id: w.sessionContext.session.kernel.id,
  status: w.sessionContext.session.kernel.status,
  counts: cells.map(c => c.model.executionCount),
  running: [...w.node.querySelectorAll('.jp-InputArea-prompt')].filter(p => p.textContent.includes('*')).length,
  errors: cells.map(c => c.model.outputs.toJSON().filter(o => o.output_type === 'error')
                     .map(o => o.ename + ': ' + o.evalue).join('\\n')).filter(e => e),
};
"""


def state(d):
    return d.execute_script(STATE)


def wait_for(d, what, fn, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.3)
    shot = os.path.join(ROOT, "build", "browser-timeout.png")
    d.save_screenshot(shot)
    pytest.fail(f"timed out waiting for {what} (the page: {shot}); state: {state(d)}")


def open_notebook(lab, name):
    d = lab["driver"]
    # saved first (into the temporary copy): a notebook with unsaved changes
    # holds the page with a "leave this page?" dialog
    d.execute_script("if (window.jupyterapp) window.jupyterapp.commands.execute('docmanager:save-all')")
    time.sleep(0.3)
    # reset: this notebook alone, not the tabs of the last page restored
    d.get(f"{lab['base']}/lab/tree/{name}?reset&token={lab['token']}")
    wait_for(d, f"{name} and its kernel", lambda: (s := state(d)) and s["status"] == "idle" and s, 60)
    d.execute_script(WATCH_PROGRESS)


def start_all(d):
    # Run All, again if the page was not ready to take it (nothing started)
    for _ in range(5):
        d.execute_script("const w = window.jupyterapp.shell.currentWidget; window.jupyterapp.shell.activateById(w.id);"
                         "window.jupyterapp.commands.execute('notebook:run-all-cells')")
        deadline = time.time() + 5
        while time.time() < deadline:
            s = state(d)
            if s["status"] != "idle" or s["running"] or any(s["counts"]):
                return
            time.sleep(0.2)
    pytest.fail(f"Run All did not start: {state(d)}")


def run_all(lab, name):
    d = lab["driver"]
    open_notebook(lab, name)
    st = state(d)
    assert st["kernel"] == KERNEL, st
    start_all(d)
    st = wait_for(d, f"{name} to run", lambda: (s := state(d)) and s["status"] == "idle" and not s["running"]
                  and all(s["counts"]) and s, RUN_SECONDS)
    assert not st["errors"], f"{name}: {st['errors']}"
    return st


def svg_images(d):
    """Per code cell holding SVG outputs: [cell index, SVG outputs in the
    model, pictures drawn in the cell's node (decoded SVG <img>, or inline
    <svg> with shapes and a size), broken <img>, mime types]"""
    return d.execute_script("""
const w = window.jupyterapp.shell.currentWidget;
const rows = [];
w.content.widgets.forEach((c, i) => {
  if (c.model.type !== 'code') return;
  const outs = c.model.outputs.toJSON().filter(o => o.data && o.data['image/svg+xml']);
  if (!outs.length) return;
  const imgs = [...c.node.querySelectorAll('.jp-OutputArea img')].filter(m => m.src.startsWith('data:image/svg+xml'));
  // a bundle with text/html too (the timelines: <svg> inline, for hovers) shows the HTML
  const inline = [...c.node.querySelectorAll('.jp-OutputArea-output svg')].filter(g =>
    !g.parentElement.closest('svg') && g.getBoundingClientRect().width > 50 && g.getBoundingClientRect().height > 20 &&
    g.querySelectorAll('rect, path, line, polyline, text').length > 0);
  rows.push([i, outs.length, imgs.filter(m => m.complete && m.naturalWidth > 0).length + inline.length,
             imgs.filter(m => m.complete && m.naturalWidth === 0).length, outs.map(o => Object.keys(o.data).join(','))]);
});
return rows;
""")


def screenshot(d, name):
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    path = os.path.join(ROOT, "build", "browser-" + name.replace(".ipynb", ".png"))
    d.save_screenshot(path)
    assert os.path.getsize(path) > 10000, path
    return path


def check_pictures(d, name):
    # each image may take a moment to decode
    deadline = time.time() + 20
    while True:
        time.sleep(0.3)
        rows = svg_images(d)
        if all(r[2] >= r[1] for r in rows) or time.time() > deadline:
            break
    assert all(r[2] >= r[1] and r[3] == 0 for r in rows), \
        f"{name}: SVG outputs that did not render as images ([cell, outputs, decoded, broken, types]): {rows}"
    return sum(r[1] for r in rows)


@pytest.mark.parametrize("name", ORDER)
def test_notebook_in_the_browser(lab, name):
    d = lab["driver"]
    run_all(lab, name)
    n = check_pictures(d, name)
    if name != "seed.ipynb":
        assert n >= 1, f"{name}: no SVG picture"
    # the screenshot shows the first picture (the top of a notebook is text)
    d.execute_script("""
const w = window.jupyterapp.shell.currentWidget;
const pic = w.node.querySelector('.jp-OutputArea-output img, .jp-OutputArea-output svg.ldist-timeline, .ldist-timeline svg');
if (pic) pic.scrollIntoView({block: 'center'});""")
    time.sleep(0.5)
    print(f"{name}: {n} SVG pictures rendered")
    screenshot(d, name)


def test_progress_in_place_and_within_the_area(lab):
    d = lab["driver"]
    run_all(lab, "seed.ipynb")
    r = d.execute_script("""
const seen = window.__prog.seen;
let texts = 0;
for (const [out, s] of seen) texts += s.size;
const outs = [...window.jupyterapp.shell.currentWidget.node.querySelectorAll('.jp-OutputArea-output')].filter(o => o.querySelector('progress'));
const fit = outs.filter(o => o.textContent.includes('val_loss'));
const geo = fit.map(o => {
  const area = o.closest('.jp-OutputArea-child') || o;
  const box = area.getBoundingClientRect();
  const walker = document.createTreeWalker(o, NodeFilter.SHOW_TEXT);
  let right = 0;
  while (walker.nextNode()) {
    const t = walker.currentNode, i = t.textContent.indexOf('val_loss');
    if (i < 0) continue;
    const r = document.createRange(); r.setStart(t, i); r.setEnd(t, i + 8);
    right = Math.max(right, r.getBoundingClientRect().right);
  }
  const scrollers = [o, ...o.querySelectorAll('*')].filter(e => e.scrollWidth > e.clientWidth + 1 &&
      getComputedStyle(e).overflowX !== 'visible' && getComputedStyle(e).overflowX !== 'hidden');
  return {right: right, box_right: box.right, scroll: scrollers.length, ow: o.scrollWidth, cw: o.clientWidth};
});
return {texts: texts, outputs: seen.size, now: outs.length, fit: geo};
""")
    print(r)
    assert r["fit"], f"no progress output shows val_loss: {r}"
    assert r["texts"] > r["outputs"], f"the progress never changed in place: {r}"
    assert r["now"] <= 3, f"the progress left {r['now']} outputs (a growing log?): {r}"
    for g in r["fit"]:
        assert g["scroll"] == 0 and g["ow"] <= g["cw"] + 1, f"the progress scrolls sideways: {g}"
        assert 0 < g["right"] <= g["box_right"] + 1, f"val_loss lies past the output area's edge: {g}"


def test_tab_completion_offers_fit(lab):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    d = lab["driver"]
    open_notebook(lab, "seed.ipynb")
    start_all(d)
    wait_for(d, "seed.ipynb to run", lambda: (s := state(d)) and s["status"] == "idle" and not s["running"]
             and all(s["counts"]) and s, RUN_SECONDS)
    d.execute_script("""
const w = window.jupyterapp.shell.currentWidget;
w.content.activeCellIndex = w.content.widgets.length - 1;
window.jupyterapp.commands.execute('notebook:insert-cell-below');""")
    time.sleep(0.5)
    d.execute_script("window.jupyterapp.commands.execute('notebook:enter-edit-mode')")
    time.sleep(0.3)
    ed = d.switch_to.active_element
    ed.send_keys("model:")
    ed.send_keys(Keys.TAB)
    items = wait_for(d, "the completer", lambda: [e.text for e in d.find_elements(By.CSS_SELECTOR, ".jp-Completer-item")], 20)
    assert any(i.split()[0] == "fit" or i.startswith("fit") for i in items), f"Tab after model: offers {items}"
    ed.send_keys(Keys.ESCAPE)


def test_interrupt_from_the_toolbar_keeps_the_kernel(lab):
    from selenium.webdriver.common.by import By
    d = lab["driver"]
    open_notebook(lab, "seed.ipynb")
    before = state(d)["kernel_id"]
    long_fit = ("keep_me = 42\\nprint('fitting')\\n"
                "local m = nn.Sequential{ nn.Dense(8, 'relu'), nn.Dense(1) }\\n"
                "m:compile{ optimizer = optim.SGD(0.01), loss = 'mse' }\\n"
                "m:fit(tensor.randn(256, 16), tensor.randn(256, 1), { epochs = 100000, batch_size = 8, verbose = 0 })\\n"
                "after_fit = true")
    d.execute_script(f"""
const w = window.jupyterapp.shell.currentWidget;
w.content.activeCellIndex = 0;
window.jupyterapp.commands.execute('notebook:insert-cell-above');
w.content.activeCell.model.sharedModel.setSource("{long_fit}");
window.jupyterapp.commands.execute('notebook:run-cell');""")
    wait_for(d, "the long fit to start", lambda: "fitting" in str(d.execute_script(
        "return window.jupyterapp.shell.currentWidget.content.widgets[0].model.outputs.toJSON()")), 30)
    time.sleep(2)
    assert state(d)["status"] == "busy", "the long fit ended by itself: " + str(d.execute_script(
        "const w = window.jupyterapp.shell.currentWidget; return [w.content.widgets[0].model.sharedModel.getSource(), "
        "w.content.widgets[0].model.outputs.toJSON()]"))
    button = d.find_element(By.CSS_SELECTOR, "[data-command='notebook:interrupt-kernel']")
    button.click()
    wait_for(d, "the kernel to go idle after the interrupt", lambda: state(d)["status"] == "idle", 30)
    d.execute_script("""
const w = window.jupyterapp.shell.currentWidget;
window.jupyterapp.commands.execute('notebook:insert-cell-below');
w.content.activeCell.model.sharedModel.setSource("print(keep_me, after_fit)");
window.jupyterapp.commands.execute('notebook:run-cell');""")
    time.sleep(0.5)
    wait_for(d, "the check cell", lambda: state(d)["status"] == "idle", 20)
    out = d.execute_script("""
const w = window.jupyterapp.shell.currentWidget;
const texts = c => c.model.outputs.toJSON().map(o => o.text || (o.ename ? o.ename + ': ' + o.evalue : '')).join('');
return [texts(w.content.widgets[0]), texts(w.content.widgets[1])];""")
    after = state(d)["kernel_id"]
    assert after == before, "the kernel was restarted"
    assert "nterrupt" in out[0], f"the fit cell does not say it was interrupted: {out[0]!r}"
    assert out[1].split() == ["42", "nil"], f"the variables after the interrupt: {out[1]!r}"
