mkdir -p work && cp inventory.json work/inventory.json
