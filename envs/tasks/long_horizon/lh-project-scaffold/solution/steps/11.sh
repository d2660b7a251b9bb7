cat > calcpkg/README.md <<'MD'
# calc

A tiny calculator.

## Usage

    bin/calc 3 + 4

## Development

    make test
    make dist
MD
make -s -C calcpkg test && make -s -C calcpkg dist
