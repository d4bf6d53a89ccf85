// What the console's browser tests share: a fresh Chromium context whose pages record every
// Content-Security-Policy violation, a form submitted and its navigation awaited, a table
// cell's text, and the scroll boxes a table overflows.

/** Wider than its box by more than this many pixels, a table scrolls sideways. */
export const SCROLL_TOLERANCE_PX = 4;

/**
 * A fresh context of `browser` whose pages record every Content-Security-Policy
 * violation, as the browser reports it to the page and to its console:
 * `{ context, violations }`.
 */
export async function watchedContext(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, ...options });
  context.setDefaultTimeout(10_000);
  const violations = [];
  await context.exposeBinding('reportViolation', (_source, text) => violations.push(text));
  // Injected by the browser itself, not by the page: the policy does not apply to it.
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) =>
      window.reportViolation(`${e.violatedDirective}: ${e.blockedURI}`));
  });
  context.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) violations.push(message.text());
  });
  return { context, violations };
}

/** Clicks `selector` and waits for the navigation it causes; its response. */
export async function submit(page, selector) {
  const [response] = await Promise.all([page.waitForNavigation(), page.click(selector)]);
  return response;
}

/** The trimmed text of the cell of class `name` in `row`. */
export async function cell(row, name) {
  return (await row.locator(`td.${name}`).textContent()).trim();
}

/** The scroll boxes of the page whose table is wider than they are (id: widths). */
export function overflowingBoxes(page) {
  return page.$$eval('.scroll', (boxes, tolerance) =>
    boxes.filter((box) => box.scrollWidth > box.clientWidth + tolerance)
      .map((box) => `${box.firstElementChild?.id}: ${box.scrollWidth} > ${box.clientWidth}`),
  SCROLL_TOLERANCE_PX);
}
