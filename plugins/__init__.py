"""Other built-in plugins: extra services that previews commonly need."""
