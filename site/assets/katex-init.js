// Render the math that pymdownx.arithmatex (generic mode) wrapped in \( \) and \[ \], on every page
// load, including Material's instant navigation. Plain `$` in text is left alone.
document$.subscribe(function ({ body }) {
  renderMathInElement(body, {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
});
