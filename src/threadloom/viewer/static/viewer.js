// threadloom view: small progressive enhancements. Every link works without them.
// No inline handlers (the Content-Security-Policy forbids them); HTML fetched from the
// viewer itself, already escaped on the server, is parsed with DOMParser.
"use strict";

async function fetchPage(href) {
  const response = await fetch(href, { headers: { Accept: "text/html" } });
  if (!response.ok) throw new Error(`${response.status} ${href}`);
  return new DOMParser().parseFromString(await response.text(), "text/html");
}

// "Load older messages": prepend the previous page's messages instead of navigating.
async function loadOlder(event, link) {
  const list = document.getElementById("messages");
  if (!list) return;
  event.preventDefault();
  link.textContent = "Loading…";
  try {
    const page = await fetchPage(link.href);
    const older = page.querySelectorAll("#messages > li");
    const first = list.firstElementChild;
    for (const item of older) list.insertBefore(document.adoptNode(item), first);
    const next = page.getElementById("load-older");
    if (next) {
      link.href = next.href;
      link.textContent = next.textContent;
    } else {
      link.parentElement.remove();
    }
  } catch (error) {
    link.textContent = "Could not load older messages: open the link";
    link.dataset.failed = "1";
  }
}

// "Show all": replace a shortened message by the whole one.
async function expand(event, link) {
  const item = link.closest("li.msg");
  if (!item) return;
  event.preventDefault();
  link.textContent = "Loading…";
  try {
    const page = await fetchPage(link.href);
    const whole = page.querySelector("ol.messages > li.msg");
    if (whole) item.replaceWith(document.adoptNode(whole));
  } catch (error) {
    link.textContent = "Could not load the message: open the link";
    link.dataset.failed = "1";
  }
}

// One listener for the whole page, so links added by "load older" work too; a link whose
// fetch failed is followed as a plain link.
document.addEventListener("click", (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey) return;
  const link = event.target instanceof Element ? event.target.closest("a") : null;
  if (!link || link.dataset.failed) return;
  if (link.id === "load-older") loadOlder(event, link);
  else if (link.classList.contains("expand")) expand(event, link);
});
