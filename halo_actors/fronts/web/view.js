// Drawing: the session list, the live tree and the selected session's transcript.
//
// Every string from the server is set with textContent (el() below): model and tool
// output is shown as text, never parsed as HTML. Transcript entries keep their DOM
// element and are redrawn only when their version changed.

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const RESULT_SHOWN = 4000; // characters of a tool result drawn (the rest: "…")

function clip(text, size) {
  return text.length > size ? `${text.slice(0, size)}…` : text;
}

export function drawSessions(list, rows, selectedRoot, onOpen) {
  list.replaceChildren(
    ...rows.map((row) => {
      const item = el("li");
      const when = new Date(row.updatedAt).toLocaleString();
      const button = el("button", "session", row.title || `Session of ${when}`);
      button.type = "button";
      button.dataset.sessionId = row.sessionId;
      button.title = row.sessionId;
      if (row.sessionId === selectedRoot) button.setAttribute("aria-current", "true");
      button.addEventListener("click", () => onOpen(row.sessionId));
      item.append(button);
      return item;
    }),
  );
}

export function drawTree(list, tree, selected, onSelect) {
  const rows = [];
  const walk = (parent, depth) => {
    for (const node of tree.children(parent)) {
      rows.push(treeRow(node, depth, node.id === selected, onSelect));
      walk(node.id, depth + 1);
    }
  };
  walk(null, 0);
  list.replaceChildren(...rows);
}

function treeRow(node, depth, selected, onSelect) {
  const item = el("li", "node");
  item.style.setProperty("--depth", String(depth));
  item.dataset.sessionId = node.id;
  item.dataset.state = node.state;
  const button = el("button", "node-button");
  button.type = "button";
  button.title = node.id;
  if (selected) button.setAttribute("aria-current", "true");
  button.addEventListener("click", () => onSelect(node.id));
  const state = el("span", "state", node.state);
  state.dataset.state = node.state;
  button.append(el("span", "node-label", (depth ? "└ " : "") + node.label), state);
  if (node.mailbox > 0) button.append(el("span", "queued", `queued ${node.mailbox}`));
  if (node.tool) button.append(el("span", "node-tool", node.tool));
  item.append(button);
  return item;
}

// Keeps one DOM element per transcript entry; redraws only changed entries.
export class TranscriptView {
  constructor(list) {
    this.list = list;
    this.shown = null; // the node whose entries are in the list
    this.drawn = new WeakMap(); // entry -> {element, version}
  }

  draw(node) {
    const atBottom = this.list.scrollHeight - this.list.scrollTop - this.list.clientHeight < 40;
    if (node !== this.shown) {
      this.shown = node;
      this.list.replaceChildren();
    }
    if (!node) return;
    node.entries.forEach((entry, index) => {
      let drawn = this.drawn.get(entry);
      if (!drawn) {
        drawn = { element: el("li"), version: -1 };
        this.drawn.set(entry, drawn);
      }
      if (drawn.version !== entry.version) {
        fillEntry(drawn.element, entry, node);
        drawn.version = entry.version;
      }
      if (this.list.children[index] !== drawn.element) {
        this.list.insertBefore(drawn.element, this.list.children[index] || null);
      }
    });
    if (atBottom) this.list.scrollTop = this.list.scrollHeight;
  }
}

function fillEntry(item, entry, node) {
  item.className = `entry ${entry.kind}`;
  item.dataset.kind = entry.kind;
  const parts = [];
  switch (entry.kind) {
    case "user":
      parts.push(el("div", "who", entry.folded ? "you (queued, folded in by a stop)" : "you"));
      parts.push(el("div", "text", entry.text));
      break;
    case "report":
    case "task":
      parts.push(el("div", "who", `from ${entry.sources.map(shortId).join(", ")}`));
      parts.push(el("div", "text", entry.text));
      break;
    case "assistant": {
      if (entry.thinking) {
        const details = el("details", "thinking");
        details.open = Boolean(entry.thinkingOpen);
        details.addEventListener("toggle", () => {
          entry.thinkingOpen = details.open;
        });
        details.append(el("summary", "", "thinking"), el("div", "text", entry.thinking));
        parts.push(details);
      }
      parts.push(el("div", "who", node.label));
      parts.push(el("div", "text", entry.text));
      break;
    }
    case "tool":
      parts.push(toolCall(entry));
      break;
    case "error":
      parts.push(el("div", "text", entry.text));
      break;
    default:
      parts.push(el("div", "text", entry.text));
  }
  item.replaceChildren(...parts);
}

function toolCall(entry) {
  const box = el("div", "tool-call");
  const input = Object.keys(entry.input).length ? JSON.stringify(entry.input) : "";
  box.append(el("div", "tool-head", `⚙ ${entry.name}`), el("code", "tool-input", input));
  if (entry.output === null) {
    const pending = el("div", "tool-output pending", "running…");
    pending.dataset.pending = "true";
    box.append(pending);
  } else {
    const output = el("pre", `tool-output${entry.isError ? " failed" : ""}`);
    output.textContent = clip(entry.output, RESULT_SHOWN);
    box.append(output);
  }
  return box;
}

function shortId(id) {
  return id.split(">").pop();
}
