// Requests to the HTTP front, and the tree stream (docs/http.md, docs/ui.md).
//
// The token goes in the x-token header of every request. The one exception is the
// tree stream: an EventSource cannot set headers, so its URL carries ?token=.
// The stream resumes by itself: the browser sends Last-Event-ID after a drop (the
// server asks for a 1 s retry), and when the browser gives up (an error answer, a
// server that was down for long) a new EventSource starts from the last seq seen.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  async request(method, path, body) {
    const init = { method, headers: { "x-token": this.token }, cache: "no-store" };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    if (!response.ok) {
      let message = `HTTP ${response.status}`;
      try {
        message = (await response.json()).error || message;
      } catch (_) {
        // not JSON: keep the status line
      }
      throw new ApiError(response.status, message);
    }
    return response;
  }

  async json(method, path, body) {
    return (await this.request(method, path, body)).json();
  }

  sessions() {
    return this.json("GET", "/api/web/sessions");
  }

  mint() {
    return this.json("POST", "/api/web/sessions", {});
  }

  // Send a message. The answer is an SSE stream of the run; the page follows the
  // tree stream instead, so once the server has taken the message (the answer's
  // headers) the body is dropped: the turn goes on.
  async chat(sessionId, message) {
    const response = await this.request("POST", "/api/web/chat", { sessionId, message });
    if (response.body) await response.body.cancel();
    return true;
  }

  interrupt(sessionId, mode) {
    return this.json("POST", "/api/web/interrupt", { sessionId, mode });
  }

  stop(sessionId) {
    return this.json("POST", "/api/web/stop", { sessionId });
  }

  archive(sessionId) {
    return this.json("POST", "/api/web/archive", { sessionId });
  }
}

// Follows one tree: onRecord(record) for each record, in seq order, once each;
// onLink(state) with "live" | "reconnecting".
export class TreeStream {
  constructor(api, sessionId, { onRecord, onOpen, onLink }) {
    this.api = api;
    this.sessionId = sessionId;
    this.onRecord = onRecord;
    this.onOpen = onOpen;
    this.onLink = onLink;
    this.lastSeq = 0;
    this.records = 0;
    this.duplicates = 0;
    this.source = null;
    this.timer = null;
    this.closed = false;
    this.open();
  }

  url() {
    const query = new URLSearchParams({ sessionId: this.sessionId, token: this.api.token });
    if (this.lastSeq > 0) query.set("lastEventId", String(this.lastSeq));
    return `/api/web/tree?${query}`;
  }

  open() {
    const source = new EventSource(this.url());
    this.source = source;
    source.onopen = () => this.onLink("live");
    source.onmessage = (message) => this.receive(JSON.parse(message.data));
    source.onerror = () => {
      if (this.closed || source !== this.source) return;
      this.onLink("reconnecting");
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up: start again from the last record seen.
        clearTimeout(this.timer);
        this.timer = setTimeout(() => this.closed || this.open(), 1000);
      }
    };
  }

  receive(frame) {
    if (frame.type === "tree") {
      this.onOpen(frame);
      return;
    }
    if (frame.seq <= this.lastSeq) {
      this.duplicates += 1; // never expected: the server resumes exactly
      return;
    }
    this.lastSeq = frame.seq;
    this.records += 1;
    this.onRecord(frame);
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.source) this.source.close();
  }
}
