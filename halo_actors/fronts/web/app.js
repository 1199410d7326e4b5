// The page's wiring: sign-in, the session list, one open tree, the selected session.
//
// State lives in `page`; every change schedules one redraw on the next animation
// frame. The body's data attributes (lastSeq, duplicates, link) let tests and
// people see where the stream stands.

import { Api, TreeStream } from "./api.js";
import { Tree } from "./fold.js";
import { TranscriptView, drawSessions, drawTree } from "./view.js";

const TOKEN_KEY = "halo_actors.token";
const $ = (id) => document.getElementById(id);

const page = {
  api: null,
  sessions: [],
  stream: null,
  tree: new Tree(),
  root: null,
  selected: null,
  pendingRedraw: false,
};
let transcript = null;

function toast(message) {
  const box = $("toast");
  box.textContent = message;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => {
    box.hidden = true;
  }, 6000);
}

function redraw() {
  if (page.pendingRedraw) return;
  page.pendingRedraw = true;
  requestAnimationFrame(() => {
    page.pendingRedraw = false;
    draw();
  });
}

function draw() {
  drawSessions($("session-list"), page.sessions, page.root, openTree);
  drawTree($("tree"), page.tree, page.selected, select);
  $("tree-empty").hidden = page.tree.nodes.size > 0;
  const node = page.selected ? page.tree.nodes.get(page.selected) : null;
  transcript.draw(node || null);
  $("chat-title").textContent = node ? node.label : "Transcript";
  $("chat-title").title = node ? node.id : "";
  const state = $("chat-state");
  state.textContent = node ? node.state : "";
  state.dataset.state = node ? node.state : "";
  const live = Boolean(node) && node.lifecycle !== "archived" && node.lifecycle !== "deleted";
  $("interrupt-soft").disabled = !(node && node.turnOpen);
  $("interrupt-hard").disabled = !(node && node.turnOpen);
  $("stop").disabled = !(live && (node.turnOpen || node.mailbox > 0));
  $("archive").disabled = !live;
  $("message").disabled = !live;
  $("send").disabled = !live;
  if (page.stream) {
    document.body.dataset.lastSeq = String(page.stream.lastSeq);
    document.body.dataset.duplicates = String(page.stream.duplicates);
    document.body.dataset.records = String(page.stream.records);
  }
}

function setLink(state) {
  const link = $("link");
  link.dataset.state = state;
  link.textContent = { live: "live", reconnecting: "reconnecting…", closed: "not connected" }[
    state
  ];
  document.body.dataset.link = state;
}

async function guarded(action) {
  try {
    return await action();
  } catch (error) {
    toast(error.message || String(error));
    if (error.status === 401) signOut();
    return undefined;
  }
}

async function refreshSessions() {
  const page_ = await guarded(() => page.api.sessions());
  if (page_) {
    page.sessions = page_.sessions;
    redraw();
  }
}

function openTree(sessionId) {
  if (page.stream) page.stream.close();
  page.tree = new Tree();
  page.root = sessionId;
  page.selected = sessionId;
  page.stream = new TreeStream(page.api, sessionId, {
    onOpen: () => redraw(),
    onRecord: (record) => {
      page.tree.apply(record);
      redraw();
    },
    onLink: setLink,
  });
  redraw();
}

function select(sessionId) {
  page.selected = sessionId;
  redraw();
}

function confirmThen(text, action) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  const finish = (ok) => {
    dialog.close();
    $("confirm-ok").onclick = null;
    $("confirm-cancel").onclick = null;
    if (ok) action();
  };
  $("confirm-ok").onclick = () => finish(true);
  $("confirm-cancel").onclick = () => finish(false);
  dialog.showModal();
}

async function send(event) {
  event.preventDefault();
  const box = $("message");
  const text = box.value;
  if (!text.trim() || !page.selected) return;
  box.value = "";
  const sent = await guarded(() => page.api.chat(page.selected, text));
  if (sent === undefined && !box.value) box.value = text;
  else if (page.selected === page.root) refreshSessions();
}

async function newSession() {
  const minted = await guarded(() => page.api.mint());
  if (!minted) return;
  await refreshSessions();
  openTree(minted.sessionId);
  $("message").focus();
}

function signIn(token) {
  page.api = new Api(token);
  return page.api.sessions().then((first) => {
    sessionStorage.setItem(TOKEN_KEY, token);
    page.sessions = first.sessions;
    $("login").hidden = true;
    $("main").hidden = false;
    $("sign-out").hidden = false;
    if (first.sessions.length) openTree(first.sessions[0].sessionId);
    redraw();
  });
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  if (page.stream) page.stream.close();
  Object.assign(page, { api: null, stream: null, tree: new Tree(), root: null, selected: null });
  page.sessions = [];
  $("main").hidden = true;
  $("login").hidden = false;
  $("sign-out").hidden = true;
  setLink("closed");
}

function wire() {
  transcript = new TranscriptView($("transcript"));
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    $("token").value = "";
    signIn(token).catch((error) => {
      page.api = null;
      toast(error.status === 401 ? "That token was not accepted." : error.message);
    });
  });
  $("sign-out").addEventListener("click", signOut);
  $("new-session").addEventListener("click", newSession);
  $("composer").addEventListener("submit", send);
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  const act = (label, call) => () => {
    const target = page.selected;
    return guarded(async () => {
      await call(target);
      if (label) toast(label);
    });
  };
  $("interrupt-soft").addEventListener("click", act("", (s) => page.api.interrupt(s, "soft")));
  $("interrupt-hard").addEventListener("click", act("", (s) => page.api.interrupt(s, "hard")));
  $("stop").addEventListener("click", () =>
    confirmThen("Stop this session and everything under it? Queued messages are kept.",
      act("", (s) => page.api.stop(s))),
  );
  $("archive").addEventListener("click", () =>
    confirmThen("Archive this session and everything under it? Queued messages are dropped " +
      "and it leaves the list.", act("", async (s) => {
      await page.api.archive(s);
      await refreshSessions();
    })),
  );
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) signIn(saved).catch(() => signOut());
  setLink("closed");
}

wire();
