{-# LANGUAGE ImplicitPrelude, DataKinds, KindSignatures, ScopedTypeVariables, TypeApplications, AllowAmbiguousTypes,
             TypeOperators, FlexibleContexts, ExplicitNamespaces, NoStarIsType, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The simulation harness behind every emitted @Sim.hs@ (not synthesized).

It drives the top entity's AXI4-Stream ports (K2C.Axi) cycle by cycle.

Sim protocol (docs/reference/project.md, "The simulation protocol"): stdin holds @N@, then @N@ lines of the
flattened input's raw integers (row-major); stdout gets @N@ lines, each
printed as the sample's last output beat moves: a classifier's
@accept_cycle output_cycle class raw_0 ... raw_{m-1}@ ('simMain'), an image
or sequence output's @accept_cycle output_cycle raw_0 ... raw_{n-1}@ (the
whole output tensor, row-major: 'simBeats'). Each sample is cut into @k@ beats of @c@ values (the last
axis of the input tensor), @s_axis_tlast@ on the last. @accept_cycle@ is the
cycle the sample's /first/ beat moved, @output_cycle@ the cycle its /last/
output beat moved. Cycles count from the first cycle after reset. Each beat is held until
@s_axis_tready@ takes it. By default beats come back to back and downstream is
always ready; @--gap-max K --seed S@ inserts 0..K idle cycles (tvalid low)
before each beat and holds @m_axis_tready@ low for 0..K cycles before each
cycle it is high (pseudo-random, reproducible from @S@; the generated HDL
testbenches use the same generator, so they see the same cycles).

A design with the weight port (@--writable-weights@, 'simMainWritable', 'simBeatsWritable';
with @--readable-weights@ too, 'simMainReadable', 'simBeatsReadable') also reads weight
messages from stdin: a line @w b_0 b_1 ...@ between two samples' lines (not counted in @N@)
is a message of 32-bit beats (unsigned integers), sent on @s_axis_weights_*@ with @tlast@ on
the last, after the outputs of every sample before it have moved and before the next
sample's first beat: the host's side of K2C.WeightBus. A line @r b_0 b_1 ...@ (a readable
design's) is a message sent the same way that the harness also waits the answer of (a read
naming a layer and at least one of its words): each answer, from any message, prints @r
cycle a_0 a_1 ...@ as its last beat moves (its beats as unsigned integers, the cycle its
last beat moved), among the samples' lines in cycle order. Under @--gap-max@ each weight
beat follows 0..K idle cycles too, from a sequence of its own (the seed xor @0x2f7a1c3d@),
and @m_axis_weights_tready@ stalls as @m_axis_tready@ does, from the seed xor @0x61c88647@.

The harness fails (stderr, exit code 1) if @m_axis_tlast@ is not high on
exactly each sample's last output beat, if @tlast_error@ rises, or if the outputs have not all appeared within a
cycle budget, rather than hanging.

A top entity of several outputs ('simHeads'): each output port prints its own line per
sample as the sample's last beat on that port moves, @port accept_cycle output_cycle ...@
(the port's index first, then its line as above). Each port's tready has its own stall
pattern under @--gap-max@ (the seed mixed with the port's index).

A top entity of several inputs ('simPorts'): a sample's stdin line holds every input's raw
integers, input after input in the model's order (each row-major); each input port has its
own source, its beats back to back or with its own idle cycles under @--gap-max@ (the seed
mixed with the port's index, the first port's the seed itself). The output lines are
'simHeads'' (one port's index 0 for one output); @accept_cycle@ is the cycle the last of the
input ports took the sample's first beat.
-}
module K2C.Sim
  ( AxiTop
  , simMain
  , simBeats
    -- * A top entity with the weight port (K2C.WeightBus)
  , WritableTop
  , simMainWritable
  , simBeatsWritable
    -- * A top entity with the weight port that reads back (K2C.WeightReadBack)
  , ReadableTop
  , simMainReadable
  , simBeatsReadable
    -- * A top entity of several outputs
  , HeadsTop
  , Port (..)
  , simHeads
  , resultValues
  , beatValues
  , randoms
    -- * A top entity of several inputs
  , InPort (..)
  , PortsTop
  , simPorts
  , packValues
  ) where

import Clash.Prelude
  ( BitPack, BitSize, Bit, BitVector, Clock, Enable, Index, KnownNat, Reset, SFixed, SNat (..)
  , Signed, Signal, System, Vec, bitToBool, boolToBit, clockGen, enableGen, indicesI
  , natToNum, resetGenN, sf, toList, unSF, type (<=) )
import Clash.Signal.Internal (Signal ((:-)))
import Control.Monad (when)
import Data.Bits (shiftR, xor)
import Data.Word (Word64)
import GHC.TypeLits (type (+), type (*))
import System.Environment (getArgs)
import System.Exit (ExitCode (..), exitWith)
import System.IO (BufferMode (..), hPutStrLn, hSetBuffering, stderr, stdout)

import K2C.Axi (AxiIn, AxiOut, BeatData, ResultData, packBeat, unpackBeat, unpackResult)

-- | The shape of an emitted top entity: input beats of @c@ values of type @a@,
-- output beats @d@ ('ResultData' of a classifier, 'BeatData' of an image).
type AxiTop c a d
  = Clock System -> Reset System -> Enable System -> AxiIn System c a (AxiOut System d)

-- | An emitted top entity with the weight port: 'AxiTop''s ports, then
-- @s_axis_weights_tdata@, @_tvalid@, @_tlast@ in; 'AxiOut''s, then @s_axis_weights_tready@.
type WritableTop c a d
  = Clock System -> Reset System -> Enable System
  -> AxiIn System c a
       (  Signal System (BitVector 32) -> Signal System Bit -> Signal System Bit
       -> ( Signal System Bit, Signal System d, Signal System Bit, Signal System Bit, Signal System Bit
          , Signal System Bit ) )

-- | An emitted top entity with the weight ports that read back: 'AxiTop''s ports, then
-- @s_axis_weights_tdata@, @_tvalid@, @_tlast@ and @m_axis_weights_tready@ in; 'AxiOut''s, then
-- @s_axis_weights_tready@ and @m_axis_weights_tdata@, @_tvalid@, @_tlast@. The harness runs
-- every top entity as one of these.
type ReadableTop c a d
  = Clock System -> Reset System -> Enable System
  -> AxiIn System c a
       (  Signal System (BitVector 32) -> Signal System Bit -> Signal System Bit -> Signal System Bit
       -> ( Signal System Bit, Signal System d, Signal System Bit, Signal System Bit, Signal System Bit
          , Signal System Bit, Signal System (BitVector 32), Signal System Bit, Signal System Bit ) )

-- | The weight ports a top entity has, so the harness refuses the messages it cannot take.
data WeightPorts = NoWeightPort | WriteOnly | ReadWrite
  deriving Eq

-- | A top entity without the weight ports, seen as one whose port never takes a beat nor
-- answers.
noWeightPort :: forall c a d . AxiTop c a d -> ReadableTop c a d
noWeightPort top clk rst en sData sValid sLast mReady _ _ _ _ =
  (sReady, mData, mValid, mLast, err, pure 0, pure 0, pure 0, pure 0)
  where
    (sReady, mData, mValid, mLast, err) = top clk rst en sData sValid sLast mReady

-- | A top entity whose weight port only writes, seen as one that never answers.
writeOnly :: forall c a d . WritableTop c a d -> ReadableTop c a d
writeOnly top clk rst en sData sValid sLast mReady wData wValid wLast _ =
  (sReady, mData, mValid, mLast, err, wReady, pure 0, pure 0, pure 0)
  where
    (sReady, mData, mValid, mLast, err, wReady) = top clk rst en sData sValid sLast mReady wData wValid wLast

-- | One output port of a top entity of several outputs, as 'simHeads' reads it: its
-- tvalid and tlast, the integers its beat prints (a class first), its beats per sample.
data Port = Port
  { portValid  :: Signal System Bit
  , portLast   :: Signal System Bit
  , portValues :: Signal System [Integer]
  , portBeats  :: Int
  }

-- | A top entity of several outputs seen through its ports: the input ports and each output
-- port's tready in; @s_axis_tready@, the output 'Port's and @tlast_error@ out. The emitted
-- Sim.hs wraps the top entity's tuple of ports into this.
type HeadsTop c a
  =  Clock System -> Reset System -> Enable System
  -> Signal System (BeatData c a) -> Signal System Bit -> Signal System Bit
  -> [Signal System Bit]
  -> (Signal System Bit, [Port], Signal System Bit)

-- | A classifier port's beat as its line prints it: the class, then the scores.
resultValues
  :: forall m oi fo . (KnownNat m, 1 <= m, KnownNat oi, KnownNat fo, BitPack (SFixed oi fo))
  => ResultData m (SFixed oi fo) -> [Integer]
resultValues bits = toInteger (fromEnum cls) : map (toInteger . unSF) (toList scores)
  where
    (scores, cls) = unpackResult @m @(SFixed oi fo) bits

-- | An image or sequence port's beat: its values.
beatValues
  :: forall n oi fo . (KnownNat n, KnownNat oi, KnownNat fo, BitPack (SFixed oi fo))
  => BeatData n (SFixed oi fo) -> [Integer]
beatValues = map (toInteger . unSF) . toList . unpackBeat @n @(SFixed oi fo)

-- | Run the Sim protocol on a top entity of @ports@ outputs with @k@ input beats per image.
simHeads
  :: forall k c ai af
   . ( KnownNat k, 1 <= k, KnownNat c, KnownNat ai, KnownNat af
     , BitPack (SFixed ai af), KnownNat (BitSize (SFixed ai af)) )
  => SNat k -> Int -> HeadsTop c (SFixed ai af) -> Int -> IO ()
simHeads SNat ports top = simPorts [InPort (natToNum @k) (natToNum @c) (natToNum @(ai + af))] ports onePort
  where
    onePort clk rst en [(values, valid, lst)] readies =
      let (sReady, outs, err) = top clk rst en (packValues @c @ai @af <$> values) valid lst readies
      in  ([sReady], outs, err)
    onePort _ _ _ _ _ = error "K2C.Sim.simHeads: one input port"

-- | One input port of a top entity of several inputs, as 'simPorts' drives it: its beats per
-- sample, its values per beat, the bits of a value (its raw integers' range).
data InPort = InPort { inBeats :: Int, inWidth :: Int, inBits :: Int }

-- | A top entity of several inputs seen through its ports: per input port its values (a
-- beat's raw integers, 'packValues' packs them), tvalid and tlast, and each output port's
-- tready in; each input port's tready, the output 'Port's and @tlast_error@ out. The emitted
-- Sim.hs wraps the top entity's ports into this.
type PortsTop
  =  Clock System -> Reset System -> Enable System
  -> [(Signal System [Integer], Signal System Bit, Signal System Bit)]
  -> [Signal System Bit]
  -> ([Signal System Bit], [Port], Signal System Bit)

-- | A beat's raw integers as @s_axis_tdata@ (missing values are 0: an idle cycle's).
packValues
  :: forall c ai af . (KnownNat c, KnownNat ai, KnownNat af, BitPack (SFixed ai af))
  => [Integer] -> BeatData c (SFixed ai af)
packValues raws = packBeat (fmap (\i -> sf (SNat @af) (fromInteger (at (fromEnum i)))) (indicesI @c))
  where
    at j = case drop j raws of
      r : _ -> r
      []    -> 0

-- | Run the Sim protocol on a top entity of the input ports @ins@ (in the model's order) and
-- @ports@ outputs. A sample's line holds every input's raw integers, input after input; each
-- input port has its own source, with its own idle cycles under @--gap-max@ (the seed mixed
-- with the port's index, 'inputSeed'). A sample's accept cycle is the cycle the last of the
-- input ports took the sample's first beat.
simPorts :: [InPort] -> Int -> PortsTop -> Int -> IO ()
simPorts ins ports top romWords = do
  options <- parseOptions <$> getArgs
  samples <- parseSamples <$> getContents
  images  <- either failWith pure (traverse (splitSample ins) samples)
  hSetBuffering stdout LineBuffering
  let readies = [ stalls (seed options `xor` (0x5bd1e995 + fromIntegral p)) options | p <- [0 .. ports - 1] ]
      inputs  = [ drive (replicate resetCycles Nothing ++ scheduleValues (inputSeed (seed options) j) options
                                                                       (map (!! j) images))
                        (bitToBool <$> (readiesIn !! j))
                | j <- [0 .. length ins - 1] ]
      (readiesIn, outs, errOut) =
        top clockGen (resetGenN (SNat @ResetCycles)) enableGen
            [ (maybe [] inValues <$> i, boolToBit . isBeat <$> i, maybe 0 (boolToBit . inLast) <$> i) | i <- inputs ]
            (map (fmap boolToBit) readies)
      count  = length images
      beats  = sum (map inBeats ins) + maximum (map portBeats outs)
      budget = fixedSlack + count * perWordSlack * (romWords + beats * (gapMax options + 1))
      takes  = [ signalList ((\b r -> (maybe False inFirst b && r)) <$> i <*> (bitToBool <$> r'))
               | (i, r') <- zip inputs readiesIn ]
      cycles = drop resetCycles (zip (transposeViews takes) (signalList (bitToBool <$> errOut)))
      views  = [ drop resetCycles (zip4' (signalList (bitToBool <$> portValid o)) (signalList (bitToBool <$> portLast o))
                                         (signalList (portValues o)) (signalList r))
               | (o, r) <- zip outs readies ]
  printed <- reportPorts (map portBeats outs) (count * ports)
               (zip [0 ..] (take budget (zip cycles (transposeViews views))))
  when (printed < count * ports) $
    failWith ("simulation: " ++ show printed ++ " of " ++ show (count * ports)
              ++ " output lines within " ++ show budget ++ " cycles")
  where
    isBeat = maybe False (const True)
    zip4' (a : as) (b : bs) (c : cs) (d : ds) = (a, b, c, d) : zip4' as bs cs ds
    zip4' _ _ _ _ = []
    transposeViews vs = map head vs : transposeViews (map tail vs)

-- | The gap seed of input port @j@: the seed itself for the first port (a design of one input
-- sees the seed as it is).
inputSeed :: Word64 -> Int -> Word64
inputSeed s j = s `xor` (0x2545f491 * fromIntegral j)

-- | Each output port's lines: the accept cycles of the samples every input port has begun
-- (the latest of the ports' first beats) that a port has still to finish, the beats of its
-- oldest one seen so far; a line as a sample's last beat on a port moves.
reportPorts
  :: [Int] -> Int
  -> [(Int, (([Bool], Bool), [(Bool, Bool, [Integer], Bool)]))]
  -> IO Int
reportPorts perSample wanted = go [] (map (const []) perSample) (map (const (0, [])) perSample) 0
  where
    go firsts pending seen printed cycles
      | printed == wanted = pure printed
      | otherwise = case cycles of
          [] -> pure printed
          (t, ((takes, err), views)) : rest -> do
            when err $ failWith ("simulation: tlast_error rose in cycle " ++ show t)
            let firsts0 = if null firsts then map (const []) takes else firsts
                firsts1 = [ if took then q ++ [t] else q | (q, took) <- zip firsts0 takes ]
                (firsts2, accepts) = begun firsts1 []
                pending' = map (++ accepts) pending
            results <- sequence
              [ step t p n q s v | (p, n, q, s, v) <- zip5' [0 :: Int ..] perSample pending' seen views ]
            let (pending'', seen'', lines') = unzip3 results
            go firsts2 pending'' seen'' (printed + sum lines') rest
    -- the samples whose first beat every input port has taken, and their accept cycles
    begun qs acc
      | all (not . null) qs = begun (map tail qs) (acc ++ [maximum (map head qs)])
      | otherwise           = (qs, acc)
    step t p n q (k, outs) (valid, lst, values, ready) = case q of
      accept : later | valid && ready -> do
        let done = k + 1 == n
        when (lst /= done) $
          failWith ("simulation: m" ++ show p ++ "_axis_tlast " ++ (if done then "low" else "high")
                    ++ " on output beat " ++ show k ++ " of a sample, cycle " ++ show t)
        if done
          then do
            putStrLn (unwords (show p : show accept : show t : map show (concat (reverse (values : outs)))))
            pure (later, (0, []), 1)
          else pure (q, (k + 1, values : outs), 0)
      _ -> pure (q, (k, outs), 0 :: Int)
    zip5' (a : as) (b : bs) (c : cs) (d : ds) (e : es) = (a, b, c, d, e) : zip5' as bs cs ds es
    zip5' _ _ _ _ _ = []

-- | One scheduled beat of an input port: its raw integers, first beat of its sample, last beat.
data InBeat = InBeat { inValues :: [Integer], inFirst :: Bool, inLast :: Bool }

-- | A port's beats with their idle cycles (@--gap-max@, from the seed @s@).
scheduleValues :: Word64 -> Options -> [[[Integer]]] -> [Maybe InBeat]
scheduleValues s options images =
  concat (zipWith (\gap b -> replicate gap Nothing ++ [Just b]) (gapList s options) (concatMap beatsOf images))
  where
    beatsOf image = [ InBeat x (i == 0) (i == length image - 1) | (i, x) <- zip [0 :: Int ..] image ]

-- | One sample's line cut into each input port's beats: exactly the ports' @k * c@ values,
-- input after input, each in its range.
splitSample :: [InPort] -> [Integer] -> Either String [[[Integer]]]
splitSample ins raws
  | length raws /= total = Left ("expected " ++ show total ++ " values per sample, got " ++ show (length raws))
  | otherwise            = traverse cut (zip ins (offsets 0 ins))
  where
    total = sum [ inBeats p * inWidth p | p <- ins ]
    offsets _ []       = []
    offsets o (p : ps) = o : offsets (o + inBeats p * inWidth p) ps
    cut (InPort k c bits, o)
      | any outOfRange mine = Left ("raw input out of range: " ++ unwords (map show raws))
      | otherwise           = Right [ take c (drop (b * c) mine) | b <- [0 .. k - 1] ]
      where
        mine = take (k * c) (drop o raws)
        outOfRange r = r < negate (2 ^ (bits - 1)) || r > 2 ^ (bits - 1) - 1

-- | A tready: high after reset, then low for 0..gapMax cycles before each high cycle.
stalls :: Word64 -> Options -> Signal System Bool
stalls s options =
  fromList (replicate resetCycles True ++ concatMap (\gap -> replicate gap False ++ [True]) (gapList s options))

gapList :: Word64 -> Options -> [Int]
gapList s options = map (`mod` (gapMax options + 1)) (randoms s)

signalList :: Signal System a -> [a]
signalList (x :- xs) = x : signalList xs

-- | Cycles the reset is held at the start; the protocol's cycle 0 follows them.
type ResetCycles = 1

resetCycles :: Int
resetCycles = natToNum @ResetCycles

-- | The cycle budget is
-- @fixedSlack + N * perWordSlack * (romWords + (k + j) * (gapMax + 1))@:
-- generous (a sample needs about @romWords + 2 * layers@ cycles), but finite.
fixedSlack, perWordSlack :: Int
fixedSlack   = 1000
perWordSlack = 100

-- | Command-line options.
data Options = Options { gapMax :: Int, seed :: Word64 }

-- | One scheduled input beat: the packed data, first beat of its sample, last beat.
data Beat c = Beat (BitVector c) Bool Bool

-- | One cycle of the trace after reset.
data Step c r = Step
  { inBeat   :: Maybe (Beat c)  -- ^ what the source shows (Nothing: tvalid low)
  , sReady   :: Bool
  , mData    :: BitVector r
  , mValid   :: Bool
  , mLast    :: Bool
  , tlastErr :: Bool
  , mReady   :: Bool
  , answer   :: Maybe (BitVector 32, Bool)  -- ^ a read's answer beat that moves, and its tlast
  }

-- | Run the Sim protocol on a classifier's top entity with @k@ beats per image
-- (one output beat: the scores and the class). @romWords@ is the sum of the
-- layers' ROM word counts; it sizes the cycle budget.
simMain
  :: forall k c ai af m oi fo
   . ( KnownNat k, 1 <= k, KnownNat c, KnownNat ai, KnownNat af, KnownNat m, 1 <= m, KnownNat oi, KnownNat fo
     , BitPack (SFixed ai af), BitPack (SFixed oi fo), KnownNat (BitSize (SFixed ai af)) )
  => SNat k -> AxiTop c (SFixed ai af) (ResultData m (SFixed oi fo)) -> Int -> IO ()
simMain SNat top = simRun @k @c @ai @af @1 (classLine @m @oi @fo) (noWeightPort @c @(SFixed ai af) top) NoWeightPort

-- | 'simMain' of a classifier with the weight port: weight messages between the samples.
simMainWritable
  :: forall k c ai af m oi fo
   . ( KnownNat k, 1 <= k, KnownNat c, KnownNat ai, KnownNat af, KnownNat m, 1 <= m, KnownNat oi, KnownNat fo
     , BitPack (SFixed ai af), BitPack (SFixed oi fo), KnownNat (BitSize (SFixed ai af)) )
  => SNat k -> WritableTop c (SFixed ai af) (ResultData m (SFixed oi fo)) -> Int -> IO ()
simMainWritable SNat top = simRun @k @c @ai @af @1 (classLine @m @oi @fo) (writeOnly @c @(SFixed ai af) top) WriteOnly

-- | 'simMain' of a classifier with the weight ports that read back: weight messages, reads
-- among them, between the samples.
simMainReadable
  :: forall k c ai af m oi fo
   . ( KnownNat k, 1 <= k, KnownNat c, KnownNat ai, KnownNat af, KnownNat m, 1 <= m, KnownNat oi, KnownNat fo
     , BitPack (SFixed ai af), BitPack (SFixed oi fo), KnownNat (BitSize (SFixed ai af)) )
  => SNat k -> ReadableTop c (SFixed ai af) (ResultData m (SFixed oi fo)) -> Int -> IO ()
simMainReadable SNat top = simRun @k @c @ai @af @1 (classLine @m @oi @fo) top ReadWrite

-- | A classifier's line: the class, then the scores.
classLine
  :: forall m oi fo . (KnownNat m, 1 <= m, KnownNat oi, KnownNat fo, BitPack (SFixed oi fo))
  => [ResultData m (SFixed oi fo)] -> [Integer]
classLine [bits] = let (scores, cls) = unpackResult @m @(SFixed oi fo) bits
                   in  toInteger (fromEnum cls) : map (toInteger . unSF) (toList scores)
classLine beats  = error ("K2C.Sim: one output beat per sample, got " ++ show (length beats))

-- | Run the Sim protocol on a top entity whose output is an image or a
-- sequence: @j@ output beats of @n@ values per sample, printed as one line.
simBeats
  :: forall k c ai af j n oi fo
   . ( KnownNat k, 1 <= k, KnownNat c, KnownNat ai, KnownNat af, KnownNat j, 1 <= j, KnownNat n
     , KnownNat oi, KnownNat fo
     , BitPack (SFixed ai af), BitPack (SFixed oi fo), KnownNat (BitSize (SFixed ai af)) )
  => SNat k -> SNat j -> AxiTop c (SFixed ai af) (BeatData n (SFixed oi fo)) -> Int -> IO ()
simBeats SNat SNat top = simRun @k @c @ai @af @j (beatsLine @n @oi @fo) (noWeightPort @c @(SFixed ai af) top) NoWeightPort

-- | 'simBeats' with the weight port: weight messages between the samples.
simBeatsWritable
  :: forall k c ai af j n oi fo
   . ( KnownNat k, 1 <= k, KnownNat c, KnownNat ai, KnownNat af, KnownNat j, 1 <= j, KnownNat n
     , KnownNat oi, KnownNat fo
     , BitPack (SFixed ai af), BitPack (SFixed oi fo), KnownNat (BitSize (SFixed ai af)) )
  => SNat k -> SNat j -> WritableTop c (SFixed ai af) (BeatData n (SFixed oi fo)) -> Int -> IO ()
simBeatsWritable SNat SNat top = simRun @k @c @ai @af @j (beatsLine @n @oi @fo) (writeOnly @c @(SFixed ai af) top) WriteOnly

-- | 'simBeats' with the weight ports that read back: weight messages, reads among them,
-- between the samples.
simBeatsReadable
  :: forall k c ai af j n oi fo
   . ( KnownNat k, 1 <= k, KnownNat c, KnownNat ai, KnownNat af, KnownNat j, 1 <= j, KnownNat n
     , KnownNat oi, KnownNat fo
     , BitPack (SFixed ai af), BitPack (SFixed oi fo), KnownNat (BitSize (SFixed ai af)) )
  => SNat k -> SNat j -> ReadableTop c (SFixed ai af) (BeatData n (SFixed oi fo)) -> Int -> IO ()
simBeatsReadable SNat SNat top = simRun @k @c @ai @af @j (beatsLine @n @oi @fo) top ReadWrite

-- | An image or sequence output's line: every beat's values.
beatsLine
  :: forall n oi fo . (KnownNat n, KnownNat oi, KnownNat fo, BitPack (SFixed oi fo))
  => [BeatData n (SFixed oi fo)] -> [Integer]
beatsLine = concatMap (map (toInteger . unSF) . toList . unpackBeat @n @(SFixed oi fo))

-- | The protocol for @k@ input and @j@ output beats per sample; @decode@ turns a
-- sample's output beats into the integers its line prints after the cycles.
-- @weightPorts@: the top's weight ports, which say whether stdin may hold weight messages
-- and reads.
simRun
  :: forall k c ai af j w
   . ( KnownNat k, 1 <= k, KnownNat c, KnownNat ai, KnownNat af, KnownNat j, 1 <= j
     , BitPack (SFixed ai af), KnownNat (BitSize (SFixed ai af)) )
  => ([BitVector w] -> [Integer]) -> ReadableTop c (SFixed ai af) (BitVector w) -> WeightPorts -> Int -> IO ()
simRun decode top weightPorts romWords = do
  options <- parseOptions <$> getArgs
  items   <- parseItems <$> getContents
  when (weightPorts == NoWeightPort && any isMessage items) $
    failWith "simulation: a weight message, but this design's weights are not writable (emit --writable-weights)"
  when (weightPorts /= ReadWrite && any isRead items) $
    failWith "simulation: a read message, but this design's weights are not readable (emit --readable-weights)"
  parsed  <- either failWith pure (traverse (either (fmap Left . messageBeats) (fmap Right . toBeats @k @c @ai @af)) items)
  hSetBuffering stdout LineBuffering
  let count   = length [ () | Right _ <- parsed ]
      sent    = sum [ length m | Left (_, m) <- parsed ]
      answers = length [ () | Left (True, _) <- parsed ]
      -- an answer's words: a read's count beat ([23:0])
      asked   = sum [ fromIntegral (b `mod` 2 ^ (24 :: Int)) | Left (True, _ : b : _) <- parsed ] :: Int
      beats   = natToNum @k + natToNum @j :: Int
      budget  = fixedSlack + count * perWordSlack * (romWords + beats * (gapMax options + 1)) + perWordSlack * sent
                + perWordSlack * (gapMax options + 1) * asked
  (printed, answered) <- report (natToNum @j) decode count answers
                           (zip [0 ..] (take budget (trace top options (natToNum @j) (map (either (Left . snd) Right) parsed))))
  when (printed < count) $
    failWith ("simulation: " ++ show printed ++ " of " ++ show count
              ++ " outputs within " ++ show budget ++ " cycles")
  when (answered < answers) $
    failWith ("simulation: " ++ show answered ++ " of " ++ show answers
              ++ " read answers within " ++ show budget ++ " cycles")
  where
    isMessage = either (const True) (const False)
    isRead = either fst (const False)

-- | The cycle-by-cycle trace after reset, with the beats driven through
-- @s_axis_tready@ and @m_axis_tready@ from the options, and each weight message
-- (@Left@) through @s_axis_weights_tready@ once the outputs of the @j@-beat
-- samples before it have all moved.
trace
  :: forall c a w
   . (KnownNat c, BitPack a)
  => ReadableTop c a (BitVector w) -> Options -> Int -> [Either [BitVector 32] [Vec c a]]
  -> [Step (c * BitSize a) w]
trace top options perSample items =
  drop resetCycles (steps input readyIn dataOut validOut lastOut errOut readyOut answers)
  where
    (readyIn, dataOut, validOut, lastOut, errOut, readyWeights, answerData, answerValid, answerLast) =
      top clockGen (resetGenN (SNat @ResetCycles)) enableGen
          (maybe 0 (\(Beat d _ _) -> d) <$> input)
          (boolToBit . isJust' <$> input)
          (maybe 0 (\(Beat _ _ l) -> boolToBit l) <$> input)
          (boolToBit <$> readyOut)
          (maybe 0 fst <$> weight)
          (boolToBit . isJust' <$> weight)
          (maybe 0 (boolToBit . snd) <$> weight)
          (boolToBit <$> readyAnswer)
    answers  = (\d v l r -> if bitToBool v && r then Just (d, bitToBool l) else Nothing)
                 <$> answerData <*> answerValid <*> answerLast <*> readyAnswer
    driven   = driveItems (replicate resetCycles Idle
                             ++ schedule 0 (gaps (seed options)) (gaps (seed options `xor` weightSeedXor)) items)
                          (bitToBool <$> readyIn) (bitToBool <$> readyWeights) outputsMoved
    input    = fst <$> driven
    weight   = snd <$> driven
    outputsMoved = counted ((&&) <$> (bitToBool <$> validOut) <*> readyOut)
    -- an image's beats each after its idle cycles; a message after the outputs of the
    -- @done@ samples before it, its beats each after idle cycles of their own sequence
    schedule :: Int -> [Int] -> [Int] -> [Either [BitVector 32] [Vec c a]] -> [Item (c * BitSize a)]
    schedule _ _ _ [] = []
    schedule done gs ws (Right image : rest) =
      concat (zipWith (\gap b -> replicate gap Idle ++ [Image b]) mine (beatsOf image))
        ++ schedule (done + 1) later ws rest
      where
        (mine, later) = splitAt (length image) gs
    schedule done gs ws (Left message : rest) =
      Drained (done * perSample)
        : concat (zipWith3 (\gap i b -> replicate gap Idle ++ [Weight b (i == length message - 1)])
                           mine [0 :: Int ..] message)
        ++ schedule done gs later rest
      where
        (mine, later) = splitAt (length message) ws
    beatsOf image = [ Beat (packBeat x) (i == 0) (i == length image - 1)
                    | (i, x) <- zip [0 :: Int ..] image ]
    readyOut = stalled 0x5bd1e995
    readyAnswer = stalled answerSeedXor
    -- a ready low for 0..K cycles before each cycle it is high, from the seed xor @x@
    stalled x = fromList (replicate resetCycles True
                          ++ concatMap (\gap -> replicate gap False ++ [True]) (gaps (seed options `xor` x)))
    gaps     = map (`mod` (gapMax options + 1)) . randoms
    isJust'  = maybe False (const True)

-- | The weight beats' idle cycles draw from the seed xor this (the testbenches' too).
weightSeedXor :: Word64
weightSeedXor = 0x2f7a1c3d

-- | The stalls of @m_axis_weights_tready@ draw from the seed xor this (the testbenches' too).
answerSeedXor :: Word64
answerSeedXor = 0x61c88647

-- | What the sources show in a cycle, in schedule order: nothing, an image's
-- beat (until it moves), a weight beat (until it moves), or nothing until the
-- count of output beats moved reaches a number.
data Item c = Idle | Image (Beat c) | Weight (BitVector 32) Bool | Drained Int

-- | The image and weight sources from a schedule, given both readies and the
-- output beats moved before each cycle.
driveItems
  :: [Item c] -> Signal System Bool -> Signal System Bool -> Signal System Int
  -> Signal System (Maybe (Beat c), Maybe (BitVector 32, Bool))
driveItems items ~(sr :- srs) ~(wr :- wrs) ~(n :- ns) = case items of
  []               -> (Nothing, Nothing) :- driveItems [] srs wrs ns
  Idle : rest      -> (Nothing, Nothing) :- driveItems rest srs wrs ns
  Image b : rest   -> (Just b, Nothing) :- driveItems (if sr then rest else items) srs wrs ns
  Weight b l : rest -> (Nothing, Just (b, l)) :- driveItems (if wr then rest else items) srs wrs ns
  Drained k : rest
    | n >= k       -> driveItems rest (sr :- srs) (wr :- wrs) (n :- ns)
    | otherwise    -> (Nothing, Nothing) :- driveItems items srs wrs ns

-- | How many cycles before each one were True.
counted :: Signal System Bool -> Signal System Int
counted moves = total
  where
    total = 0 :- ((\t m -> if m then t + 1 else t) <$> total <*> moves)

steps
  :: Signal System (Maybe (Beat c)) -> Signal System Bit -> Signal System (BitVector r)
  -> Signal System Bit -> Signal System Bit -> Signal System Bit -> Signal System Bool
  -> Signal System (Maybe (BitVector 32, Bool))
  -> [Step c r]
steps (i :- is) (sr :- srs) (d :- ds) (v :- vs) (l :- ls) (e :- es) (r :- rs) (a :- as) =
  Step i (bitToBool sr) d (bitToBool v) (bitToBool l) (bitToBool e) r a : steps is srs ds vs ls es rs as

-- | Print a line per sample as its last output beat moves (@j@ beats a sample), and a line
-- @r cycle b_0 b_1 ...@ per read answer as its last beat moves (the beats as unsigned
-- integers), until @wanted@ samples and @answers@ answers are out; the numbers of each.
report :: Int -> ([BitVector w] -> [Integer]) -> Int -> Int -> [(Int, Step c w)] -> IO (Int, Int)
report perSample decode wanted answers = go [] (0 :: Int) [] 0 [] 0
  where
    -- @seen@ output beats of the oldest pending sample have moved, @outs@ newest first;
    -- @heard@ the beats of the answer under way, newest first
    go pending seen outs printed heard answered cycles
      | printed == wanted && answered >= answers = pure (printed, answered)
      | otherwise = case cycles of
          [] -> pure (printed, answered)
          (t, step) : rest -> do
            when (tlastErr step) $
              failWith ("simulation: tlast_error rose in cycle " ++ show t)
            (heard', answered') <- case answer step of
              Just (d, True) -> do
                putStrLn (unwords ("r" : show t : map (show . toInteger) (reverse (d : heard))))
                pure ([], answered + 1)
              Just (d, False) -> pure (d : heard, answered)
              Nothing -> pure (heard, answered)
            let pending' = case inBeat step of
                  Just (Beat _ True _) | sReady step -> pending ++ [t]
                  _                                  -> pending
            case pending' of
              accept : later | mValid step && mReady step -> do
                let done = seen + 1 == perSample
                when (mLast step /= done) $
                  failWith ("simulation: m_axis_tlast " ++ (if done then "low" else "high")
                            ++ " on output beat " ++ show seen ++ " of a sample, cycle " ++ show t)
                if done
                  then do
                    putStrLn (unwords (show accept : show t : map show (decode (reverse (mData step : outs)))))
                    go later 0 [] (printed + 1) heard' answered' rest
                  else go pending' (seen + 1) (mData step : outs) printed heard' answered' rest
              _ -> length pending' `seq` go pending' seen outs printed heard' answered' rest

-- | An input signal that shows each scheduled beat until it moves; @Nothing@
-- entries are idle cycles and always pass.
drive :: [Maybe a] -> Signal System Bool -> Signal System (Maybe a)
drive items ~(ready :- readies) = case items of
  []                -> Nothing :- drive [] readies
  Nothing : rest    -> Nothing :- drive rest readies
  Just x : rest     -> Just x :- drive (if ready then rest else items) readies

fromList :: [a] -> Signal System a
fromList (x : xs) = x :- fromList xs
fromList []       = error "K2C.Sim.fromList: finite list"

-- | splitmix64: a small reproducible generator, so the harness needs no
-- package beyond base.
randoms :: Word64 -> [Int]
randoms = map (fromIntegral . (`shiftR` 33) . mix) . tail . iterate (+ 0x9e3779b97f4a7c15)
  where
    mix z0 = let z1 = (z0 `xor` (z0 `shiftR` 30)) * 0xbf58476d1ce4e5b9
                 z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94d049bb133111eb
             in  z2 `xor` (z2 `shiftR` 31)

parseOptions :: [String] -> Options
parseOptions = go (Options 0 1)
  where
    go o ("--gap-max" : k : rest) = go o { gapMax = read k } rest
    go o ("--seed" : s : rest)    = go o { seed = read s } rest
    go o []                       = o
    go _ other                    = error ("K2C.Sim: unknown arguments " ++ unwords other)

-- | @N@, then @N@ lines of integers, with weight messages (@w b_0 b_1 ...@: @Left@, not
-- answered; @r b_0 b_1 ...@: a read the harness waits for the answer of) between them.
parseItems :: String -> [Either (Bool, [Integer]) [Integer]]
parseItems text = case lines text of
  header : rest -> go (read header :: Int) rest
  []            -> []
  where
    go n (line : rest)
      | n <= 0    = []
      | otherwise = case words line of
          "w" : beats -> Left (False, map read beats) : go n rest
          "r" : beats -> Left (True, map read beats) : go n rest
          values      -> Right (map read values) : go (n - 1) rest
    go _ [] = []

-- | A weight message's beats: 32-bit unsigned integers (and whether it is answered).
messageBeats :: (Bool, [Integer]) -> Either String (Bool, [BitVector 32])
messageBeats (answered, beats)
  | null beats                         = Left "empty weight message"
  | any (\b -> b < 0 || b >= 2 ^ (32 :: Int)) beats = Left ("weight beat out of range: " ++ unwords (map show beats))
  | otherwise                          = Right (answered, map fromInteger beats)

-- | @N@, then @N@ lines of integers.
parseSamples :: String -> [[Integer]]
parseSamples text = case lines text of
  header : rest -> map (map read . words) (take (read header) rest)
  []            -> []

-- | One input sample: exactly @k * c@ raw integers, each in range, cut into
-- @k@ beats of @c@ values (row-major: consecutive values fill a beat).
toBeats
  :: forall k c ai af . (KnownNat k, KnownNat c, KnownNat ai, KnownNat af)
  => [Integer] -> Either String [Vec c (SFixed ai af)]
toBeats raws
  | length raws /= k * c = Left ("expected " ++ show (k * c) ++ " values per sample, got "
                                 ++ show (length raws))
  | any outOfRange raws  = Left ("raw input out of range: " ++ unwords (map show raws))
  | otherwise            = Right [ beat (take c (drop (b * c) raws)) | b <- [0 .. k - 1] ]
  where
    k = natToNum @k
    c = natToNum @c
    beat values = fmap (\i -> sf (SNat @af) (fromInteger (values !! fromEnum i))) indicesI
    outOfRange r = r < toInteger (minBound :: Signed (ai + af))
                || r > toInteger (maxBound :: Signed (ai + af))

failWith :: String -> IO a
failWith message = hPutStrLn stderr message >> exitWith (ExitFailure 1)
