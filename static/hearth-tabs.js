// Tabs (a deployment's page), CSP-safe: an element [data-tabs=<page kind>] holds a [role=tablist] of buttons
// [role=tab][data-tab=<name>] and the panels [data-tab-panel=<name>]. One panel shows at a time. The chosen tab is
// kept in the URL's fragment (#<name>: a reload or a shared link opens it) and in localStorage per page kind (the
// same page opened again without a fragment), and htmx's refreshes swap what is inside the panels, never the
// panels, so they keep it too. The tab bar is rendered hidden and shown here: without this script every panel
// shows, one under another. Arrow keys, Home and End move between tabs (the WAI-ARIA tabs pattern).
(() => {
  const stored = (group) => {
    try {
      return localStorage.getItem(`hearth:tab:${group.dataset.tabs}`);
    } catch {
      return null; // storage refused (a private window's policy): the fragment alone keeps the tab
    }
  };
  const store = (group, name) => {
    try {
      localStorage.setItem(`hearth:tab:${group.dataset.tabs}`, name);
    } catch {
      // as above
    }
  };
  const tabsOf = (group) => [...group.querySelectorAll("[role=tab][data-tab]")];

  function show(group, wanted) {
    const tabs = tabsOf(group);
    const name = tabs.some((t) => t.dataset.tab === wanted) ? wanted : tabs[0]?.dataset.tab;
    for (const tab of tabs) {
      const on = tab.dataset.tab === name;
      tab.setAttribute("aria-selected", String(on));
      tab.tabIndex = on ? 0 : -1;
    }
    for (const panel of group.querySelectorAll("[data-tab-panel]")) panel.hidden = panel.dataset.tabPanel !== name;
    window.dispatchEvent(new Event("resize")); // charts drawn in a hidden panel take the width they have now
    return name;
  }

  function choose(group, name) {
    store(group, show(group, name));
    history.replaceState(history.state, "", `#${name}`); // no scroll, no history entry per click
  }

  function init(group) {
    const bar = group.querySelector("[role=tablist]");
    if (!bar) return;
    bar.hidden = false;
    show(group, location.hash.slice(1) || stored(group));
    bar.addEventListener("click", (event) => {
      const tab = event.target instanceof Element ? event.target.closest("[role=tab][data-tab]") : null;
      if (tab) choose(group, tab.dataset.tab);
    });
    bar.addEventListener("keydown", (event) => {
      const tabs = tabsOf(group);
      const at = tabs.indexOf(document.activeElement);
      if (at < 0) return;
      const next = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1 }[event.key];
      if (next === undefined) return;
      event.preventDefault();
      const tab = tabs[(next + tabs.length) % tabs.length];
      choose(group, tab.dataset.tab);
      tab.focus();
    });
    window.addEventListener("hashchange", () => {
      const name = location.hash.slice(1);
      if (tabsOf(group).some((t) => t.dataset.tab === name)) store(group, show(group, name));
    });
  }

  document.addEventListener("DOMContentLoaded", () => document.querySelectorAll("[data-tabs]").forEach(init));
})();
