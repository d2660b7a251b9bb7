make build
