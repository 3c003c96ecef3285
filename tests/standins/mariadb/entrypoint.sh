#!/bin/sh
set -eu
mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    mariadbd --user=mysql --skip-networking --socket=/run/mysqld/init.sock &
    pid=$!
    for _ in $(seq 1 60); do mariadb-admin --socket=/run/mysqld/init.sock ping >/dev/null 2>&1 && break; sleep 0.5; done
    mariadb --socket=/run/mysqld/init.sock <<SQL
CREATE DATABASE IF NOT EXISTS \`$MYSQL_DATABASE\`;
CREATE USER '$MYSQL_USER'@'%' IDENTIFIED BY '$MYSQL_PASSWORD';
GRANT ALL ON \`$MYSQL_DATABASE\`.* TO '$MYSQL_USER'@'%';
ALTER USER 'root'@'localhost' IDENTIFIED BY '$MYSQL_ROOT_PASSWORD';
CREATE USER 'root'@'%' IDENTIFIED BY '$MYSQL_ROOT_PASSWORD';
GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
SQL
    kill "$pid" && wait "$pid" || true
fi
# As the official image: clients are matched by address, never by a resolved host name.
exec mariadbd --user=mysql --bind-address=0.0.0.0 --port=3306 --skip-name-resolve
