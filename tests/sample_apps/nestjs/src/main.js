// A Node sample app for preview tests: no dependencies, so `npm ci` works offline.
const http = require("http");
const net = require("net");
const fs = require("fs");
const path = require("path");

const message = fs.readFileSync(path.join(__dirname, "message.txt"), "utf8").trim();
http.createServer((req, res) => {
  if (req.url === "/health") return res.end("ok");
  if (req.url === "/db") {
    const socket = net.connect(Number(process.env.DB_PORT), process.env.DB_HOST, () => {
      socket.end();
      res.end("db reachable");
    });
    socket.on("error", (err) => { res.statusCode = 502; res.end(String(err)); });
    return;
  }
  res.end(`nestjs says: ${message}\n`);
}).listen(Number(process.env.PORT));
