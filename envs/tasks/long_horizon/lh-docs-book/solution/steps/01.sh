mkdir -p book
