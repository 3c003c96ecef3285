import { Controller, Get, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { readFileSync } from 'fs';
import { join } from 'path';
import { Note } from './notes/note.entity';
import { NotesModule } from './notes/notes.module';

@Controller()
class HomeController {
  @Get()
  home(): string {
    return `nestjs-typeorm says: ${readFileSync(join(__dirname, '..', 'message.txt'), 'utf8').trim()}\n`;
  }

  @Get('health')
  health(): string {
    return 'ok';
  }
}

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Note],
      synchronize: true,
      retryAttempts: 20,
      retryDelay: 1000,
    }),
    NotesModule,
  ],
  controllers: [HomeController],
})
export class AppModule {}
