jq '[.items[] | select(.qty < 5) | .sku] | sort' work/inventory.json > work/low_stock.json
