// aicenter console: upload a folder or files as a new catalog version, through the REST API.
//
// 1. declare the files (relative path, size) with POST /api/v1/<kind>/<item>/uploads; the server hashes them;
// 2. send what the upload says is missing: files smaller than the part size in bundles (48-byte ASCII header
//    per file: 16 hex digits of the index, 16 of the size, 16 "0", then the bytes), bigger ones in parts,
//    each with its SHA-256 in X-Part-Sha256;
// 3. commit, which makes the version.
// The upload id is kept in localStorage under the item and a fingerprint of the file list, so choosing the
// same files after a reload (or a lost connection) asks GET /api/v1/uploads/<id> and sends only the rest.
// The console's session cookie authenticates; unsafe requests carry the session's CSRF token in a header.
(function () {
  "use strict";

  var BUNDLE_BYTES = 8 * 1024 * 1024;  // like the CLI: few requests for many small files, modest memory
  var BUNDLE_FILES = 1000;
  var PARALLEL = 3;
  var HEADER_ZEROS = "0000000000000000";

  function hex16(n) {
    var s = n.toString(16);
    return HEADER_ZEROS.slice(s.length) + s;
  }

  function formatBytes(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i === 0 ? String(Math.round(n)) : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
  }

  function formatDuration(seconds) {
    if (!isFinite(seconds)) { return "…"; }
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) { return seconds + " s"; }
    if (seconds < 3600) { return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s"; }
    return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
  }

  function toHex(buffer) {
    var bytes = new Uint8Array(buffer);
    var out = "";
    for (var i = 0; i < bytes.length; i += 1) { out += (bytes[i] < 16 ? "0" : "") + bytes[i].toString(16); }
    return out;
  }

  function sha256Hex(buffer) {
    // crypto.subtle exists on secure contexts only (https, localhost, 127.0.0.1).
    if (window.crypto && window.crypto.subtle) {
      return window.crypto.subtle.digest("SHA-256", buffer).then(toHex);
    }
    return Promise.reject(new Error(
      "This page is not a secure context (https or localhost), so the browser cannot hash large files. " +
      "Open the console over https, or use the CLI: aicenter <kind> push DIR."));
  }

  function ApiError(message, status, body) {
    this.message = message;
    this.status = status;
    this.body = body;
  }

  // One request with upload progress (fetch has none). Resolves with the parsed JSON (or null).
  function request(method, url, csrf, body, headers, onProgress) {
    return new Promise(function (resolve, reject) {
      var xhr = new XMLHttpRequest();
      xhr.open(method, url);
      xhr.setRequestHeader("Accept", "application/json");
      if (method !== "GET") { xhr.setRequestHeader("X-CSRF-Token", csrf); }
      Object.keys(headers || {}).forEach(function (name) { xhr.setRequestHeader(name, headers[name]); });
      if (onProgress) {
        xhr.upload.onprogress = function (event) { onProgress(event.loaded); };
      }
      xhr.onload = function () {
        var parsed = null;
        try { parsed = xhr.responseText ? JSON.parse(xhr.responseText) : null; } catch (e) { parsed = null; }
        if (xhr.status >= 200 && xhr.status < 300) {
          resolve(parsed);
          return;
        }
        var message = parsed && parsed.error && parsed.error.message
          ? parsed.error.message
          : "The server answered " + xhr.status + " " + xhr.statusText + ".";
        reject(new ApiError(message, xhr.status, parsed));
      };
      xhr.onerror = function () {
        reject(new ApiError("The connection to the server was lost. Choose the same files again to resume.", 0, null));
      };
      if (body === undefined || body === null) {
        xhr.send();
      } else if (body instanceof Blob || body instanceof ArrayBuffer) {
        xhr.send(body);
      } else {
        xhr.setRequestHeader("Content-Type", "application/json");
        xhr.send(JSON.stringify(body));
      }
    });
  }

  // The chosen files with their paths in the version: a folder's own name is dropped (its content is the
  // version, as with `aicenter dataset push DIR`).
  function chosenFiles(fileList) {
    var files = Array.prototype.slice.call(fileList);
    var entries = files.map(function (file) {
      return { file: file, path: file.webkitRelativePath || file.name };
    });
    var tops = {};
    entries.forEach(function (e) { tops[e.path.split("/")[0]] = true; });
    var names = Object.keys(tops);
    if (names.length === 1 && entries.every(function (e) { return e.path.indexOf("/") > 0; })) {
      var cut = names[0].length + 1;
      entries.forEach(function (e) { e.path = e.path.slice(cut); });
    }
    entries.sort(function (a, b) { return a.path < b.path ? -1 : a.path > b.path ? 1 : 0; });
    return entries;
  }

  function fingerprint(entries) {
    var text = JSON.stringify(entries.map(function (e) { return [e.path, e.file.size, e.file.lastModified]; }));
    if (window.crypto && window.crypto.subtle && window.TextEncoder) {
      return window.crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)).then(function (d) {
        return toHex(d).slice(0, 32);
      });
    }
    var h = 5381;  // djb2: good enough to tell file lists apart when crypto.subtle is missing
    for (var i = 0; i < text.length; i += 1) { h = ((h * 33) ^ text.charCodeAt(i)) >>> 0; }
    return Promise.resolve(h.toString(16) + "-" + text.length);
  }

  function storageGet(key) {
    try { return window.localStorage.getItem(key); } catch (e) { return null; }
  }

  function storageSet(key, value) {
    try {
      if (value === null) { window.localStorage.removeItem(key); } else { window.localStorage.setItem(key, value); }
    } catch (e) { /* private mode: the upload works, it just cannot resume after a reload */ }
  }

  function Uploader(panel) {
    this.panel = panel;
    this.kind = panel.getAttribute("data-kind");
    this.itemId = panel.getAttribute("data-item-id");
    this.csrf = panel.getAttribute("data-csrf");
    this.versionUrl = panel.getAttribute("data-version-url");
    this.inputs = Array.prototype.slice.call(panel.querySelectorAll("[data-upload-input]"));
    this.startButton = panel.querySelector("[data-upload-start]");
    this.summary = panel.querySelector("[data-upload-summary]");
    this.errorBox = panel.querySelector("[data-upload-error]");
    this.progressBox = panel.querySelector("[data-upload-progress]");
    this.bar = panel.querySelector("[data-upload-bar]");
    this.status = panel.querySelector("[data-upload-status]");
    this.description = panel.querySelector("[data-upload-description]");
    this.versionLink = panel.querySelector("[data-upload-version]");
    this.entries = [];
    this.key = null;
    this.busy = false;
    var self = this;
    this.inputs.forEach(function (input) {
      input.addEventListener("change", function () { self.choose(input); });
    });
    this.startButton.addEventListener("click", function () { self.start(); });
  }

  Uploader.prototype.showError = function (message) {
    this.errorBox.textContent = message;
    this.errorBox.hidden = !message;
  };

  Uploader.prototype.choose = function (input) {
    var self = this;
    if (this.busy) { return; }
    this.inputs.forEach(function (other) { if (other !== input) { other.value = ""; } });
    this.showError("");
    this.entries = chosenFiles(input.files || []);
    this.startButton.disabled = true;
    if (!this.entries.length) {
      this.summary.textContent = "Nothing to upload: the folder is empty.";
      return;
    }
    var total = this.entries.reduce(function (sum, e) { return sum + e.file.size; }, 0);
    fingerprint(this.entries).then(function (fp) {
      self.key = "aicenter-upload:" + self.kind + ":" + self.itemId + ":" + fp;
      var resuming = storageGet(self.key) !== null;
      self.summary.textContent = self.entries.length + " file" + (self.entries.length === 1 ? "" : "s") + ", " +
        formatBytes(total) + (resuming ? ". An earlier upload of these files will be resumed." : ".");
      self.startButton.textContent = resuming ? "Resume upload" : "Upload";
      self.startButton.disabled = false;
    });
  };

  Uploader.prototype.start = function () {
    var self = this;
    if (this.busy || !this.entries.length) { return; }
    this.busy = true;
    this.startButton.disabled = true;
    this.inputs.forEach(function (input) { input.disabled = true; });
    this.showError("");
    this.versionLink.hidden = true;
    this.progressBox.hidden = false;
    this.setStatus("Preparing…");
    this.run().then(function (version) {
      storageSet(self.key, null);
      self.bar.value = 100;
      self.setStatus("100% · " + formatBytes(version.size_bytes) + " in " + version.file_count + " files");
      // A link rather than a jump: the 100% stays in view, and the page is there to upload the next one.
      self.versionLink.href = self.versionUrl + version.number;
      self.versionLink.textContent = "Open version " + version.number;
      self.versionLink.hidden = false;
      self.busy = false;
      self.entries = [];
      self.inputs.forEach(function (input) { input.disabled = false; input.value = ""; });
      self.startButton.textContent = "Upload";
    }, function (error) {
      self.showError(error && error.message ? error.message : String(error));
      self.busy = false;
      self.startButton.disabled = false;
      self.startButton.textContent = "Resume upload";
      self.inputs.forEach(function (input) { input.disabled = false; });
    });
  };

  Uploader.prototype.setStatus = function (text) { this.status.textContent = text; };

  // The open upload of these files, or a new one.
  Uploader.prototype.open = function () {
    var self = this;
    var known = storageGet(this.key);
    var resumed = known
      ? request("GET", "/api/v1/uploads/" + encodeURIComponent(known), this.csrf).then(function (upload) {
        return upload && (upload.state === "open" || upload.state === "committed") ? upload : null;
      }, function () { return null; })  // expired, aborted or gone: start again
      : Promise.resolve(null);
    return resumed.then(function (upload) {
      if (upload) { return upload; }
      storageSet(self.key, null);
      var body = {
        files: self.entries.map(function (e) { return { path: e.path, size: e.file.size }; }),
        description: self.description ? self.description.value.trim() : ""
      };
      return request("POST", "/api/v1/" + self.kind + "/" + self.itemId + "/uploads", self.csrf, body).then(function (created) {
        storageSet(self.key, String(created.id));
        return created;
      });
    });
  };

  Uploader.prototype.run = function () {
    var self = this;
    return this.open().then(function (upload) {
      return self.sendMissing(upload).then(function () { return self.commit(upload, 1); });
    });
  };

  Uploader.prototype.commit = function (upload, retries) {
    var self = this;
    this.setStatus("Committing…");
    return request("POST", "/api/v1/uploads/" + upload.id + "/commit", this.csrf).catch(function (error) {
      // Parts the server did not keep (e.g. sent to a replica that died): send them again, once.
      if (retries > 0 && error.status === 409 && error.body && error.body.error &&
          error.body.error.code === "upload_incomplete") {
        return request("GET", "/api/v1/uploads/" + upload.id, self.csrf).then(function (fresh) {
          return self.sendMissing(fresh).then(function () { return self.commit(fresh, retries - 1); });
        });
      }
      throw error;
    });
  };

  function partBytes(size, partSize, part) {
    return Math.max(0, Math.min(partSize, size - part * partSize));
  }

  Uploader.prototype.sendMissing = function (upload) {
    var self = this;
    if (upload.state === "committed") { return Promise.resolve(); }
    var partSize = upload.part_size;
    var missing = upload.missing || [];
    var remaining = 0;
    var bundles = [];
    var current = null;
    var parts = [];
    var byPath = {};
    this.entries.forEach(function (e) { byPath[e.path] = e; });
    missing.forEach(function (m) {
      // By path: the server's index order is its own (it may sort the declared files differently).
      var entry = byPath[m.path] || self.entries[m.index];
      if (!entry) { return; }
      var size = entry.file.size;
      if (size < partSize) {
        if (!current || current.bytes + size > BUNDLE_BYTES || current.files.length >= BUNDLE_FILES) {
          current = { files: [], bytes: 0 };
          bundles.push(current);
        }
        current.files.push({ index: m.index, file: entry.file });
        current.bytes += size;
        remaining += size;
      } else {
        (m.parts || []).forEach(function (p) {
          parts.push({ index: m.index, part: p, file: entry.file, bytes: partBytes(size, partSize, p) });
          remaining += partBytes(size, partSize, p);
        });
      }
    });
    var total = upload.total_bytes;
    var done = Math.max(0, total - remaining);
    var inflight = {};
    var started = Date.now();
    var sentAtStart = done;
    var nextId = 0;

    function report() {
      var now = done;
      Object.keys(inflight).forEach(function (k) { now += inflight[k]; });
      var pct = total > 0 ? Math.min(100, Math.floor((now / total) * 100)) : 100;
      var elapsed = (Date.now() - started) / 1000;
      var rate = elapsed > 0 ? (now - sentAtStart) / elapsed : 0;
      var eta = rate > 0 ? (total - now) / rate : Infinity;
      self.bar.value = pct;
      self.setStatus(pct + "% · " + formatBytes(now) + " of " + formatBytes(total) + " · " +
        formatBytes(rate) + "/s · " + (now >= total ? "finishing" : formatDuration(eta) + " left"));
    }

    function track(bytes, send) {
      var id = nextId;
      nextId += 1;
      inflight[id] = 0;
      return send(function (loaded) { inflight[id] = Math.min(loaded, bytes); report(); }).then(function () {
        delete inflight[id];
        done += bytes;
        report();
      });
    }

    var tasks = [];
    bundles.forEach(function (bundle) {
      tasks.push(function () {
        var pieces = [];
        bundle.files.forEach(function (f) {
          pieces.push(hex16(f.index) + hex16(f.file.size) + HEADER_ZEROS, f.file);
        });
        var body = new Blob(pieces, { type: "application/octet-stream" });
        return track(bundle.bytes, function (progress) {
          return request("POST", "/api/v1/uploads/" + upload.id + "/bundle", self.csrf, body,
            { "Content-Type": "application/octet-stream" }, progress);
        });
      });
    });
    parts.forEach(function (p) {
      tasks.push(function () {
        var start = p.part * partSize;
        return p.file.slice(start, start + p.bytes).arrayBuffer().then(function (buffer) {
          return sha256Hex(buffer).then(function (digest) {
            return track(p.bytes, function (progress) {
              return request("PUT", "/api/v1/uploads/" + upload.id + "/files/" + p.index + "/parts/" + p.part,
                self.csrf, buffer, { "Content-Type": "application/octet-stream", "X-Part-Sha256": digest }, progress);
            });
          });
        });
      });
    });
    report();

    // PARALLEL workers take tasks in order. After a failure no new task starts, but the ones in flight finish
    // before the error is shown: what the server has then is settled, so a resume sends exactly the rest.
    var position = 0;
    var failed = null;
    function worker() {
      if (failed || position >= tasks.length) { return Promise.resolve(); }
      var task = tasks[position];
      position += 1;
      return task().catch(function (error) { failed = failed || error; }).then(worker);
    }
    var workers = [];
    for (var i = 0; i < Math.min(PARALLEL, tasks.length); i += 1) { workers.push(worker()); }
    return Promise.all(workers).then(function () {
      if (failed) { throw failed; }
    });
  };

  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-upload]"), function (panel) {
      new Uploader(panel);  // eslint-disable-line no-new
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
