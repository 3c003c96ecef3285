// The benchmarks' NestJS sample: NestJS's module, controller and Express adapter from its npm packages, in plain
// JavaScript (the decorators applied as functions) so that the build needs no TypeScript compiler.
require("reflect-metadata");
const fs = require("fs");
const path = require("path");
const { Controller, Get, Module } = require("@nestjs/common");
const { NestFactory } = require("@nestjs/core");

const message = fs.readFileSync(path.join(__dirname, "message.txt"), "utf8").trim();

class AppController {
  health() {
    return "ok";
  }

  page() {
    return `nestjs says: ${message}\n`;
  }
}
Controller()(AppController);
for (const [route, method] of [["health", "health"], ["", "page"]]) {
  Get(route)(AppController.prototype, method, Object.getOwnPropertyDescriptor(AppController.prototype, method));
}

class AppModule {}
Module({ controllers: [AppController] })(AppModule);

NestFactory.create(AppModule, { logger: ["error", "warn"] }).then((app) => app.listen(Number(process.env.PORT)));
