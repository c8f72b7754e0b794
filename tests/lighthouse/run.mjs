// Runs Lighthouse (accessibility and best practices) on each page named, signed in through
// the session cookie given, in one Chromium, and prints one JSON line per page:
// {url, scores: {accessibility, "best-practices"}, failing: ["audit id: title", …]}, or
// {url, error} when Lighthouse could not measure the page.
//
//   node run.mjs <chromium> <cookie header> <url>…
import * as chromeLauncher from "chrome-launcher";
import lighthouse from "lighthouse";

const [chromePath, cookie, ...urls] = process.argv.slice(2);
if (!chromePath || !cookie || urls.length === 0) {
  console.error("usage: node run.mjs <chromium> <cookie header> <url>…");
  process.exit(2);
}

// Lighthouse opens a tab per page and closes it when the page is measured, but can leave a
// quiet-page check running on it (the lists poll, so they are never quiet for long); that
// check then fails with "Session closed". A failure of a measurement itself rejects the
// awaited run below, so a rejection nobody awaits says nothing about the pages.
process.on("unhandledRejection", (error) => {
  console.error(`ignored after its page was measured: ${error?.message || error}`);
});

const chrome = await chromeLauncher.launch({
  chromePath,
  chromeFlags: ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  for (const url of urls) {
    let result;
    console.error(`measuring ${url}`);
    try {
      result = await lighthouse(url, {
      port: chrome.port,
      output: "json",
      logLevel: "error",
      onlyCategories: ["accessibility", "best-practices"],
      extraHeaders: { Cookie: cookie },
      // A phone, as the pages are mostly used; throttling only slows the run.
      formFactor: "mobile",
      throttlingMethod: "provided",
      });
    } catch (error) {
      console.log(JSON.stringify({ url, error: String(error?.message || error) }));
      continue;
    }
    const { categories, audits } = result.lhr;
    const ids = new Set(Object.values(categories).flatMap((category) =>
      category.auditRefs.filter((ref) => ref.weight > 0).map((ref) => ref.id)));
    const failing = [...ids]
      .map((id) => audits[id])
      .filter((audit) => audit && audit.score !== null && audit.score < 1)
      .map((audit) => `${audit.id}: ${audit.title}`);
    console.log(JSON.stringify({
      url,
      landed: result.lhr.finalDisplayedUrl,
      scores: Object.fromEntries(Object.entries(categories).map(([id, c]) => [id, c.score])),
      failing,
    }));
  }
} finally {
  await chrome.kill();
}
