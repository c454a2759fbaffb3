// The one page global a module touches at import time (state.js: window.memlens); the
// functions under test never use the DOM.
globalThis.window ??= {};
