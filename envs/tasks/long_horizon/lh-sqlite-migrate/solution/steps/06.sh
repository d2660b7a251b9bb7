echo 'UPDATE users SET email = lower(email);' > fixes/005_lowercase_emails.sql
sqlite3 db/app.db < fixes/005_lowercase_emails.sql
sqlite3 db/app.db "INSERT INTO schema_migrations VALUES ('005');"
