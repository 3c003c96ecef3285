"""Built-in database plugins: postgres, mysql, mongodb."""
