{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             DeriveGeneric, DeriveAnyClass, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Weights read back at run time (@keras2clash emit --writable-weights
--readable-weights@; docs/guide/integration.md, "Writable weights"): the
weight port of "K2C.WeightBus" that also takes read messages, and answers them
on an AXI4-Stream master port from a read-back copy of each memory
('mirror'). Without @--readable-weights@ a design has "K2C.WeightBus"'s
'K2C.WeightBus.weightPort' and none of this: the copies double the block RAM
of the weight memories.

= The ports

@s_axis_weights_tdata@ (32 bits), @s_axis_weights_tvalid@,
@s_axis_weights_tlast@ in; @s_axis_weights_tready@ out: high but while a read
is answered (from the cycle after its count beat moves until its answer's last
beat moves). @m_axis_weights_tdata@ (32 bits), @m_axis_weights_tvalid@,
@m_axis_weights_tlast@ out, @m_axis_weights_tready@ in: the answers.

= A message

A write is "K2C.WeightBus"'s. A read:

* a header beat: the layer's index on the bus in bits [31:24], bit 23 set,
  the first word's address in bits [22:0] (a write's header has bit 23 clear:
  a memory has at most 2^23 words);
* then one beat, the number of words in bits [23:0] (bits [31:24] ignored);
* @tlast@ on the message's last beat.

A read answers the words from its address on, at most to the layer's last
(none: no answer); beats after its count beat are skipped to @tlast@ once the
answer has gone. A message naming no layer is skipped to its @tlast@.

= An answer

The words read, in address order, each as @B@ beats least significant first,
the bits past the word 0: the beats a write of them would carry after its
header. @m_axis_weights_tlast@ is on the answer's last beat. A word's beats
follow each other as @m_axis_weights_tready@ takes them; between two words
the port loads the next for a cycle (tvalid low). The count beat moving in
cycle @t@, the first beat shows from @t + 2@: a word every @B + 1@ cycles
when never stalled.

= Timing

A word whose last beat moves in cycle @t@ is in its memory from cycle @t + 3@
on ("K2C.WeightBus"), and so in the memory's read-back copy ('mirror'): a read
whose count beat moves in @t + 2@ or later (the earliest a read after the
write can send it) answers it. A read leaves the image input open and the
engines alone: it reads the copies, so images stream on while it is answered.

= Hardware

"K2C.WeightBus"'s decoder with a count of the words a read has left (the
slots, loaded whole with a word to answer, shift a slot a beat:
@m_axis_weights_tdata@ is the first slot); and each memory's read-back copy
('mirror'): a second block RAM of the same words and width, with a register
of its own before its write port and a comparison of the address. In all
@32 B + 2 sum (word bits + address bits + 1)@ flip-flops, about 100 more than
the write-only port's, and the copies' block RAM bits, as many as the
memories'.
-}
module K2C.WeightReadBack
  ( readableWeightPort
  , mirror
  , readAnswer
  ) where

import Clash.Prelude

import K2C.Memory (Neuron, WeightRom (..))
import K2C.WeightBus (QuietCycles, WeightBus, WeightWrite (..))

-- | Where the decoder is: before a header; in a write's words; skipping to
-- @tlast@; before a read's count beat; loading a word to answer (the
-- read-back memory shows it in this cycle); sending its beats.
data Phase = Header | Words | Skip | Count | Fetch | Answer
  deriving (Eq, Generic, NFDataX)

-- | The decoder's registers.
data Decoder layers beats = Decoder
  { phase    :: Phase
  , layer    :: Index layers
  , address  :: Unsigned 24    -- a write's next word; a read's next word to load
  , depth    :: Unsigned 24    -- the layer's words
  , beat     :: Index beats    -- the next beat's slot in the word
  , lastBeat :: Index beats    -- the layer's last slot
  , slots    :: Vec beats (BitVector 32)  -- a write's word; a read's word still to send, next beat first
  , out      :: Maybe (Index layers, Unsigned 24)  -- the word in the slots is to be written here
  , quiet    :: Index (QuietCycles + 1)
  , left     :: Unsigned 24    -- a read's words still to load or send, the one in the slots included
  , more     :: Bool           -- a read's message goes on after its count beat: skip it after the answer
  } deriving (Generic, NFDataX)

-- | The port: the table of the layers' memories (each one's words and its
-- beats a word, in bus order), their read-back ('readAnswer' of the layers'
-- 'mirror's: given the writes, the layer and the address in a cycle, that
-- word in the next), @s_axis_weights_tdata@, @_tvalid@, @_tlast@ and
-- @m_axis_weights_tready@. Gives the writes (registered), whether the image
-- input is closed (registered state only), @s_axis_weights_tready@ and
-- @m_axis_weights_tdata@, @_tvalid@, @_tlast@ (registered state only).
readableWeightPort
  :: forall dom layers beats
   . ( HiddenClockResetEnable dom
     , KnownNat layers, 1 <= layers, KnownNat beats, 1 <= beats )
  => Vec layers (Unsigned 24, Index (beats + 1))
  -> (  WeightBus dom layers (beats * 32) -> Signal dom (Index layers) -> Signal dom (Unsigned 24)
     -> Signal dom (BitVector (beats * 32)) )
  -> Signal dom (BitVector 32)
  -> Signal dom Bit
  -> Signal dom Bit
  -> Signal dom Bit
  -> ( WeightBus dom layers (beats * 32), Signal dom Bool, Signal dom Bit
     , Signal dom (BitVector 32), Signal dom Bit, Signal dom Bit )
readableWeightPort table readBack tdata tvalid tlast tready =
  (writes, closed <$> state, boolToBit <$> ready, (!! (0 :: Int)) . slots <$> state, boolToBit <$> sending, boolToBit <$> (finalBeat <$> state))
  where
    enabled = fromEnable hasEnable
    -- a read's answer holds the port: no message beat moves from its count beat until its last answer beat
    ready   = enabled .&&. (not . answering . phase <$> state)
    moved   = ready .&&. (bitToBool <$> tvalid)
    sending = enabled .&&. ((== Answer) . phase <$> state)
    sent    = sending .&&. (bitToBool <$> tready)
    writes  = written <$> state
    memory  = readBack writes (layer <$> state) (address <$> state)
    state   = register idle (step <$> state <*> moved <*> tdata <*> (bitToBool <$> tlast) <*> sent <*> memory)
    idle    = Decoder Header 0 0 0 0 0 (repeat 0) Nothing 0 0 False

    -- a read's answer leaves the image input open: it reads the copies ('mirror'), not the
    -- memories the engines walk
    closed s = phase s == Words || phase s == Skip || quiet s /= 0
    answering p = p == Fetch || p == Answer
    finalBeat s = beat s == lastBeat s && left s == 1

    -- The word is the slots themselves, not a copy: in the cycle the write is shown, a beat
    -- moving in changes the slots only at that cycle's end, when 'writable' takes the word.
    written s = (\(l, a) -> WeightWrite l a (pack (reverse (slots s)))) <$> out s

    step s mv d lst sn word = case phase s of
      Fetch -> s0 { phase = Answer
                  , slots = reverse (unpack word)
                  , beat = 0
                  , address = address s + 1 }
      Answer
        | not sn -> s0
        | finalBeat s -> s0 { phase = if more s then Skip else Header, left = 0 }
        | beat s == lastBeat s -> s0 { phase = Fetch, left = left s - 1 }
        | otherwise -> s0 { slots = slots s <<+ 0, beat = beat s + 1 }
      _ | not mv -> s0
      Header
        | named >= natToNum @layers -> s' { phase = if lst then Header else Skip }
        | otherwise ->
            let (words, beats) = table !! named
                decoded = s { phase = if lst then Header else if reads then Count else Words
                            , layer = fromIntegral named
                            , address = resize (unpack (slice d22 d0 d) :: Unsigned 23)
                            , depth = words
                            , beat = 0
                            , lastBeat = fromIntegral (beats - 1) }
            in  if reads then decoded { out = Nothing, quiet = quiet s0 } else decoded { out = Nothing, quiet = maxBound }
      Words ->
        let full  = replace (beat s) d (slots s)
            done  = beat s == lastBeat s
        in  s' { phase = if lst then Header else Words
               , slots = full
               , beat = if done || lst then 0 else beat s + 1
               , address = if done then address s + 1 else address s
               , out = if done && address s < depth s then Just (layer s, address s) else Nothing }
      Count ->
        let count = unpack (slice d23 d0 d) :: Unsigned 24
            room  = if address s < depth s then depth s - address s else 0
            words = min count room
        in  if words == 0 then s0 { phase = if lst then Header else Skip }
            else s0 { phase = Fetch, left = words, more = not lst }
      Skip -> s' { phase = if lst then Header else Skip }
      where
        s0    = s { out = Nothing, quiet = if quiet s == 0 then 0 else quiet s - 1 }
        s'    = s { out = Nothing, quiet = maxBound }
        named = unpack (slice d31 d24 d) :: Unsigned 8
        reads = testBit d 23

-- | The read-back copy of layer @me@'s memory: a block RAM of the ROM file
-- @rom@, written from the bus through a register as 'writable' writes the
-- memory (so each word is in both from the same cycle on), read at
-- @address@ (word 0 past the memory's end), the word a cycle later in the low
-- bits of the bus's width. The engine's memory sits inside its layer, whose
-- only outputs are its stream: the port reads this copy instead, and a read
-- never touches the memory the engine walks.
mirror
  :: forall dom layers bits words p ch w bias
   . ( HiddenClockResetEnable dom
     , KnownNat layers, KnownNat bits, KnownNat words, KnownNat p, KnownNat ch
     , BitPack w, BitPack bias )
  => Index layers
  -> WeightBus dom layers bits
  -> WeightRom words p ch w bias
  -> Signal dom (Unsigned 24)
  -> Signal dom (BitVector bits)
mirror me bus (WeightRom path) address =
  resize <$> blockRamFile (SNat @words) path (at <$> address) (register Nothing (mine <$> bus))
  where
    at :: Unsigned 24 -> Index words
    at a = if a < natToNum @words then fromIntegral a else 0
    mine :: Maybe (WeightWrite layers bits) -> Maybe (Index words, BitVector (BitSize (Vec p (Neuron ch w bias))))
    mine (Just (WeightWrite l a bits))
      | l == me = Just (fromIntegral a, resize bits)
    mine _ = Nothing

-- | The read-back of the layer a read names: its 'mirror''s word.
readAnswer :: KnownNat layers => Signal dom (Index layers) -> Vec layers (Signal dom (BitVector bits)) -> Signal dom (BitVector bits)
readAnswer layer words = (!!) <$> bundle words <*> layer
