"""Built-in framework plugins: nestjs, go, laravel, rust, python."""
