"""Messages to tokens and back: chat templates, incremental rendering, output parsers."""
