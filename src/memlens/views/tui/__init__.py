"""`memlens tui`: the terminal UI (Textual). Entry point: memlens.views.tui.app.TuiApp."""
