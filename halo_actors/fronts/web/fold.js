// Records of one tree -> the state a person sees: each node's state and transcript.
//
// The same rules as the runtime's own fold (core/state.py) for what the page shows:
// the mailbox is FIFO (a round drains `drained` messages from its head; a stop folds
// them, an archive discards them), a turn is open from agent_start to complete, and a
// tool result goes to the call with its id, else to the first call still waiting.
// Pure data: no DOM here. Every entry has `version`, bumped when it changes.

export class Node {
  constructor(id) {
    this.id = id;
    this.parent = null;
    this.title = "";
    this.agent = "";
    this.createdSeq = 0;
    this.lifecycle = "live";
    this.mailbox = 0;
    this.turnOpen = false;
    this.interruptRequested = false;
    this.pending = []; // tool entries waiting for their result, oldest first
    this.entries = [];
    this.open = null; // the assistant entry text is streaming into
    this.version = 0;
  }

  get label() {
    return this.title || this.agent || this.id.split(">").pop();
  }

  get state() {
    if (this.turnOpen) return this.pending.length ? "in tool" : "running";
    return this.lifecycle === "live" ? "idle" : this.lifecycle;
  }

  get tool() {
    const last = this.pending[this.pending.length - 1];
    return this.turnOpen && last ? describeCall(last.name, last.input) : "";
  }
}

// One line for a tool call: its command, task, target or path.
export function describeCall(name, input) {
  for (const key of ["command", "task", "session_id", "path", "pattern"]) {
    if (input && typeof input[key] === "string") return `${name}: ${input[key]}`;
  }
  return name;
}

export class Tree {
  constructor() {
    this.nodes = new Map();
    this.root = null;
    this.version = 0;
  }

  node(id) {
    let node = this.nodes.get(id);
    if (!node) {
      node = new Node(id);
      this.nodes.set(id, node);
    }
    return node;
  }

  children(id) {
    return [...this.nodes.values()]
      .filter((n) => n.parent === id && n.createdSeq && n.lifecycle !== "deleted")
      .sort((a, b) => a.createdSeq - b.createdSeq);
  }

  apply(record) {
    const node = this.node(record.sessionId);
    applyEvent(node, record.event, record.seq, this);
    node.version += 1;
    this.version += 1;
  }
}

function add(node, entry) {
  entry.version = 0;
  node.entries.push(entry);
  return entry;
}

function touch(entry) {
  entry.version += 1;
}

function assistant(node) {
  if (!node.open) node.open = add(node, { kind: "assistant", text: "", thinking: "" });
  return node.open;
}

function applyEvent(node, event, seq, tree) {
  switch (event.type) {
    case "session_created": {
      const parent = event.parentId || null;
      Object.assign(node, new Node(node.id), { parent, createdSeq: seq });
      node.title = event.title || "";
      node.agent = event.agentId || "";
      if (!parent && !tree.root) tree.root = node.id;
      break;
    }
    case "message_queued":
      node.mailbox += 1;
      if (node.lifecycle === "stopped") node.lifecycle = "live";
      break;
    case "user": {
      node.mailbox = Math.max(0, node.mailbox - (event.drained || 0));
      if (node.lifecycle === "stopped") node.lifecycle = "live";
      node.open = null;
      const sources = (event.fromSessionIds || []).filter(Boolean);
      let kind = "user"; // a person's own message
      if (sources.length) kind = sources.includes(node.parent) ? "task" : "report";
      add(node, { kind, text: event.text, sources });
      break;
    }
    case "agent_start":
      node.turnOpen = true;
      break;
    case "thinking":
      touch(assistant(node));
      node.open.thinking += event.text;
      break;
    case "stream":
      touch(assistant(node));
      node.open.text += event.text;
      break;
    case "tool_call": {
      node.open = null;
      const entry = add(node, {
        kind: "tool",
        name: event.toolName,
        id: event.toolUseId,
        input: event.toolInput || {},
        output: null,
        isError: false,
      });
      node.pending.push(entry);
      break;
    }
    case "tool_result": {
      const at = node.pending.findIndex((e) => e.id && e.id === event.toolUseId);
      const entry = node.pending.splice(at >= 0 ? at : 0, 1)[0];
      if (entry) {
        entry.output = event.uiResult ?? event.result;
        entry.isError = Boolean(event.isError);
        touch(entry);
      }
      break;
    }
    case "error":
      node.open = null;
      add(node, { kind: "error", text: event.error });
      break;
    case "complete":
      node.turnOpen = false;
      node.open = null;
      break;
    case "flags":
      if (event.interruptRequested !== undefined) node.interruptRequested = event.interruptRequested;
      break;
    case "mailbox_folded":
      node.mailbox = Math.max(0, node.mailbox - event.count);
      add(node, { kind: "user", text: event.text, sources: [], folded: true });
      break;
    case "mailbox_discarded":
      node.mailbox = Math.max(0, node.mailbox - event.count);
      add(node, { kind: "notice", text: `${event.count} queued message(s) discarded` });
      break;
    case "report_sent":
      add(node, { kind: "notice", text: `${event.kind} report sent to the parent` });
      break;
    case "compacted":
      add(node, { kind: "notice", text: "the earlier conversation was summarised" });
      break;
    case "notification":
      add(node, { kind: "notice", text: event.text });
      break;
    case "stopped":
      node.lifecycle = "stopped";
      node.turnOpen = false;
      add(node, { kind: "notice", text: "stopped" });
      break;
    case "archived":
      node.lifecycle = "archived";
      node.mailbox = 0;
      add(node, { kind: "notice", text: "archived" });
      break;
    case "deleted":
      node.lifecycle = "deleted";
      break;
    default:
      break; // assistant (already streamed), usage, context, agent_done
  }
}
