awk '$2 == "ERROR" { sub(/^[^ ]+ ERROR /, ""); print }' logs/app.log > audit/app_errors.txt
