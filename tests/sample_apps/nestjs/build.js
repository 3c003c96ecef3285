// "Build": copy src/ and the message into dist/, as `nest build` would produce dist/main.js.
const fs = require("fs");
fs.mkdirSync("dist", { recursive: true });
fs.copyFileSync("src/main.js", "dist/main.js");
fs.copyFileSync("message.txt", "dist/message.txt");
