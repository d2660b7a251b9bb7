make build
make -q build
