import { Body, Controller, Get, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { Note } from './note.entity';

@Controller('notes')
class NotesController {
  constructor(@InjectRepository(Note) private readonly notes: Repository<Note>) {}

  @Post()
  async add(@Body() body: { text: string }): Promise<Note> {
    return this.notes.save(this.notes.create({ text: body.text }));
  }

  @Get()
  async list(): Promise<string[]> {
    return (await this.notes.find({ order: { id: 'ASC' } })).map((note) => note.text);
  }
}

@Module({ imports: [TypeOrmModule.forFeature([Note])], controllers: [NotesController] })
export class NotesModule {}
